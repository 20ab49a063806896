"""The model set: configs, model classes and norm layers, copied flat next to every saved checkpoint.

On `save_pretrained`, transformers copies the file that defines the saved class and every file it reaches by
single-dot relative imports (`from .norms import build_norm`) next to the weights, so the checkpoint loads with
`trust_remote_code=True` where hf_norms is not installed. Every file here therefore imports nothing outside this
folder, and only by single-dot relative imports of sibling files. This `__init__` is not copied.
"""
