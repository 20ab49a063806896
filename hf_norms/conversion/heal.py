"""`hf-norms heal` as a module, for launchers that start one process per device:

    torchrun --nproc_per_node 2 -m hf_norms.conversion.heal FOLDER --data corpus/ --max-steps 1000
    accelerate launch --num_processes 2 -m hf_norms.conversion.heal FOLDER --data corpus/ --max-steps 1000
    python -m hf_norms.conversion.heal FOLDER --data corpus/          # one process, as `hf-norms heal`

Every option is `hf-norms heal`'s (`hf-norms heal --help`); `--batch-size` is per process. See `processes` for what
each process does.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from ..cli import main as command_line  # the command line imports what it runs only when it runs

    return command_line(["heal", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
