"""The model families: one folder per family (`bert/`, `vit/`, ...) with its configuration and model classes, as
transformers' `models/<name>/`, and what they share: the family registry (`family_registry.py`, one `FamilySpec` of
`family_spec.py` per family), the norm options every family's config takes and validates (`norm_options.py`), the
mixin and hooks every model class inherits (`modeling_norm_utils.py`, `norm_placement.py`), and the Auto and PEFT
registration that `import hf_norms` runs. A saved checkpoint's two remote-code files are generated from the family's
files and the norms they reach (`checkpoint_code.py`).
"""
