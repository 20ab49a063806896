"""CLIP's vision tower with `norm_type`: its configuration (`configuration_clip_vision_norm.py`) and model classes (`modeling_clip_vision_norm.py`), as transformers' `models/clip_vision/`."""
