"""Publishing: `push_to_hub` of a checkpoint folder with its model card (facts read from the folder, rendered from the
shipped template), which files may be uploaded and what their contents may not hold (`content_checks`: the token in
any encoding, keys, credentials, pickles, archives), the redaction of the token from every log line and error
(`redaction`), the papers cited, and the loopback Hub server (`hub.server`) that tests and the demo push to. Imports
`hf_norms.models` only."""
