"""Publishing: `push_to_hub` of a checkpoint folder with its model card (facts read from the folder, rendered from the
shipped template), which files may be uploaded and what their contents may not hold (`content_checks` with the readers
of `file_formats`: what push cannot read in full, the token in any encoding, keys and credentials; `remote_code`: code
that is not the package's), and the loopback
Hub server (`hub.server`) that tests and the demo push to. Imports `hf_norms.models` and `hf_norms.conversion`; the
server imports neither."""
