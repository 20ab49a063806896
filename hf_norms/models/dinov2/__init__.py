"""DINOv2 with `norm_type`: its configuration (`configuration_dinov2_norm.py`) and model classes (`modeling_dinov2_norm.py`), as transformers' `models/dinov2/`."""
