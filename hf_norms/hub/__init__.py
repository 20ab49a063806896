"""Publishing: `push_to_hub` of a checkpoint folder with its model card (facts read from the folder, rendered from the
shipped template), the check of which files may be uploaded, the papers cited, and the loopback Hub server
(`hub.server`) that tests and the demo push to. Imports `hf_norms.models` only."""
