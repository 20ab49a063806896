"""The norms: one file per norm_type's layer (`layernorm.py`, `dyt.py`, `derf.py`, `rmsnorm.py`, `dtn.py` with its eager
fast path `dtn_fast.py`, `sepnorm.py`, `lape.py`), the registry that names them (`registry.py`: one `NormSpec` of
`spec.py` per norm_type, torch-free), building a config's layers from it (`build.py`), the token layout every layer
reads (`token_layout.py`) and which runtime a layer runs in (`runtime.py`). They import nothing of hf_norms outside
this folder but `version_guard` and `package_only`; a checkpoint's remote code is generated from them
(`models/checkpoint_code.py`). This `__init__` imports nothing, so the registry costs no torch.
"""
