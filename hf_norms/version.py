"""The hf-norms release (pyproject.toml reads it from here)."""

VERSION = "0.1.0"
