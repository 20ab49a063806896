"""Which hf_norms files a `from_pretrained(path, norm_type=...)` runs code of, and how often it reads the norm registry.

    python -m benchmarks.files_crossed [--norm-type dyt] [--family vit]

Saves a tiny stock checkpoint of the family (the stock class, random weights) into a temporary folder, then records,
with `sys.setprofile`, every hf_norms function called while `AutoModel.from_pretrained(folder, norm_type=...)` runs
(`import hf_norms` and transformers' own imports happen before). Prints the files, the calls in each, and the calls of
the registry's lookups (`norm_spec`, `NormSpec` methods). Run it on two checkouts (`PYTHONPATH=<checkout>`) to compare
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

STOCK_CONFIGS = {
    "vit": lambda: transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, image_size=16, patch_size=4
    ),
    "bert": lambda: transformers.BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, vocab_size=99
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--norm-type", default="dyt")
    parser.add_argument("--family", choices=sorted(STOCK_CONFIGS), default="vit")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        transformers.AutoModel.from_config(STOCK_CONFIGS[args.family]()).save_pretrained(folder)
        calls = crossed(folder, args.norm_type)
    files = collections.Counter()
    for (path, _), count in calls.items():
        files[path] += count
    registry = sum(count for (path, name), count in calls.items() if name == "norm_spec" or "spec" in Path(path).stem)
    print(
        f"AutoModel.from_pretrained(<stock {args.family}>, norm_type={args.norm_type!r}) with hf-norms {hf_norms.VERSION}"
    )
    for path, count in sorted(files.items()):
        print(f"  {path}: {count} calls")
    print(
        f"{len(files)} hf_norms files, {sum(files.values())} calls; registry lookups (norm_spec, NormSpec): {registry}"
    )


if __name__ == "__main__":
    main()
