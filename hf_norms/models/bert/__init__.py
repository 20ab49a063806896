"""BERT with `norm_type`: its configuration (`configuration_bert_norm.py`) and model classes (`modeling_bert_norm.py`), as transformers' `models/bert/`."""
