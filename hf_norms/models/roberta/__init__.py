"""RoBERTa with `norm_type`: its configuration (`configuration_roberta_norm.py`) and model classes (`modeling_roberta_norm.py`), as transformers' `models/roberta/`."""
