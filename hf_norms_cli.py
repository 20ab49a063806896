"""The `hf-norms` console script: reads its arguments before `hf_norms` registers its models.

`import hf_norms` registers every family's config with transformers, which imports torch (seconds on a small machine).
While `parsing` is true, that import registers nothing, so `hf-norms --help`, each command's `--help` and every usage
error are answered with argparse and hf-norms' argument dataclasses alone; `hf_norms.cli.main` registers the models
(`hf_norms.register_models`) when a command runs. In Python, `hf_norms.cli.main(argv)` runs the same commands.
"""

from __future__ import annotations

import sys

parsing = False


def main() -> int:
    """Run `hf-norms` with `sys.argv`; returns its exit status."""
    global parsing
    parsing = True
    from hf_norms.cli import main as run

    return run()


if __name__ == "__main__":
    sys.exit(main())
