"""DeiT with `norm_type`: its configuration (`configuration_deit_norm.py`) and model classes (`modeling_deit_norm.py`), as transformers' `models/deit/`."""
