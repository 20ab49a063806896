"""The `hf-norms` command line: one subcommand per task, each defined next to the code it runs."""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> module of hf_norms that defines it with `add_cli_command(subparsers)`
SUBCOMMANDS = {
    "demo": "demo",
    "convert": "convert",
    "heal": "healing",
    "finetune": "finetune",
    "push": "publish",
    "hub": "hub_server",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hf-norms",
        description="DyT, DTN, SepNorm and LaPE for Hugging Face ViT, DeiT and BERT: convert, heal, fine-tune, publish.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in SUBCOMMANDS.values():
        importlib.import_module(f"hf_norms.{module_name}").add_cli_command(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args) or 0


if __name__ == "__main__":
    sys.exit(main())
