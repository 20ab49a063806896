"""ViT with `norm_type`: its configuration (`configuration_vit_norm.py`) and model classes (`modeling_vit_norm.py`), as transformers' `models/vit/`."""
