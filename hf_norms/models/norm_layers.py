"""The layer files of a saved checkpoint's norms, imported here so that `trust_remote_code`, which fetches a model
file's relative imports and theirs, fetches them with the model's code (`norms.py` imports this file).

The registry imports a norm's layer file by name (`NormSpec.layer`), so in the package this file imports none;
`save_pretrained` writes each checkpoint its own version, importing the files of its norms only
(`checkpoint_norms.norm_layers_source`).
"""

LAYER_MODULES: tuple[str, ...] = ()
