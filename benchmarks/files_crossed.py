"""Which hf_norms files a `from_pretrained(path, norm_type=...)` runs code of, and how often it reads the norm registry.

    python -m benchmarks.files_crossed [--norm-type dyt] [--family vit]

Saves a tiny stock checkpoint of the family (the stock class, random weights) into a temporary folder, then records,
with `sys.setprofile`, every hf_norms function called while `AutoModel.from_pretrained(folder, norm_type=...)` runs,
the code of the modules it imports included (`import hf_norms` happens before). Prints the files, the calls in each, and the calls of
how often the config was validated (`validate_norm_options`) and the registry asked for a norm by name
(`norm_spec`). Run it on two checkouts (`PYTHONPATH=<checkout>`) to compare
a layout before and after.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path

import transformers

import hf_norms

STOCK_MODELS = {
    "vit": lambda: transformers.ViTModel(
        transformers.ViTConfig(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=37,
            image_size=16,
            patch_size=4,
        )
    ),
    "bert": lambda: transformers.BertModel(
        transformers.BertConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, vocab_size=99
        )
    ),
}


def crossed(folder: str, norm_type: str) -> collections.Counter:
    """{(file below hf_norms, function): calls} while `AutoModel.from_pretrained(folder, norm_type=norm_type)` runs."""
    package = str(Path(hf_norms.__file__).parent)
    calls: collections.Counter = collections.Counter()

    def profile(frame, event, _arg):
        if event == "call" and frame.f_code.co_filename.startswith(package):
            relative = frame.f_code.co_filename[len(package) + 1 :]
            calls[relative, frame.f_code.co_name] += 1

    sys.setprofile(profile)
    try:
        transformers.AutoModel.from_pretrained(folder, norm_type=norm_type)
    finally:
        sys.setprofile(None)
    return calls


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--norm-type", default="dyt")
    parser.add_argument("--family", choices=sorted(STOCK_MODELS), default="vit")
    return parser


def main() -> None:
    args = build_parser().parse_args()
    with tempfile.TemporaryDirectory() as folder:
        STOCK_MODELS[args.family]().save_pretrained(folder)  # the stock class itself: no hf_norms model is imported
        calls = crossed(folder, args.norm_type)
    files = collections.Counter()
    for (path, _), count in calls.items():
        files[path] += count
    validations = sum(count for (_, name), count in calls.items() if name == "validate_norm_options")
    lookups = sum(count for (_, name), count in calls.items() if name == "norm_spec")
    print(
        f"AutoModel.from_pretrained(<stock {args.family}>, norm_type={args.norm_type!r}) with hf-norms {hf_norms.VERSION}"
    )
    for path, count in sorted(files.items()):
        print(f"  {path}: {count} calls")
    print(f"{len(files)} hf_norms files, {sum(files.values())} calls")
    print(f"config validations (validate_norm_options): {validations}; registry lookups by name (norm_spec): {lookups}")


if __name__ == "__main__":
    main()
