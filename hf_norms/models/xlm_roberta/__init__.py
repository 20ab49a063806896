"""XLM-RoBERTa with `norm_type`: its configuration (`configuration_xlm_roberta_norm.py`) and model classes (`modeling_xlm_roberta_norm.py`), as transformers' `models/xlm_roberta/`."""
