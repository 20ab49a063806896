"""Make the checkpoints hf-norms publishes: convert (and heal) each recipe, render its card into model_cards/, push.

    python conversions/run.py [NAME ...] [--work DIR] [--render-only] [--overwrite] [--push [--endpoint URL]]
    python conversions/run.py --list

Each `conversions/<name>.json` is one published checkpoint:

    {
      "repo_id": "hf-norms/<name>",
      "source": "packaged:minilm" | "packaged:dinov2-small" | a checkpoint folder | a Hub id,
      "convert": {keyword arguments of hf_norms.convert.convert: "norm_type", "options", "calibration_data",
                  "calibration_samples", "evaluation_data", "evaluation_samples", "max_length", ...},
      "heal": {keyword arguments of hf_norms.healing.heal: "data", "max_steps", "max_minutes", ...}   (optional;
               a recipe that heals gives its convert "heal_steps": 0, so the recorded heal is its only one),
      "config": {config fields written into the built checkpoint after healing}   (optional),
      "card": {keyword arguments of hf_norms.model_card.gather_card_facts: "base_model", "license", "notes", ...},
      "fine_tuning": {a record of `python -m benchmarks.finetune_from_stock ... --record`}   (optional)
    }

Data arguments may name packaged data as `packaged:bbc_news:<train|test>:<count>` (the first `count` articles of
`packaged.split_train_test(packaged.bbc_news())`'s split, one per line) or `packaged:fashion_mnist:<train|test>:<count>`
(the first `count` images as PNG files), and out-of-domain data as `packaged:python_docs:<count>` (the first `count` of
`packaged.python_docs_paragraphs()`) or `packaged:digits:<count>` (the first `count` of `packaged.digits_images()`, PNG
files); they are written once under `<work>/data/` as `<key>-<split>-<count>`, a name
the card maps to the Hub dataset. The checkpoint is built in `<work>/<name>` (kept, so `--render-only` re-renders the
card from its report), the card is written to `model_cards/<name>.md`, and `--push` uploads the folder with the same
card to `repo_id` (endpoint from `--endpoint` or `HF_ENDPOINT`, token from HF_TOKEN or `hf auth login`).

A recipe's `config` fields change what the checkpoint does when fine-tuned, not its weights; the card's notes must say
so and why. The values a norm fine-tunes best with (DyT and Derf: no dropout) are not a recipe's: `convert` and `heal`
write them for every checkpoint (`NormSpec.fine_tuning_config`), and the card says why. A recipe's `fine_tuning` record (the fine-tuned accuracy beside the source's, measured by the
benchmark on a build of this recipe) is written into the built checkpoint's report before its card is rendered; when
the weights are not those it was measured on (their sha256 differs), its description says so. `--threads N` sets
torch's intra-op threads (healing budgets are in CPU time: one thread spends it most efficiently).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from hf_norms import packaged
from hf_norms.conversion.config_checks import check_config_values
from hf_norms.conversion.convert import convert
from hf_norms.conversion.healing import heal
from hf_norms.conversion.report import read_report, record_fine_tuning
from hf_norms.errors import ConversionError, handled_errors
from hf_norms.hub.model_card import model_card_for_folder
from hf_norms.hub.publish import push_to_hub
from hf_norms.readers import read_json_object

RECIPES = Path(__file__).resolve().parent
CARDS = RECIPES.parent / "model_cards"
PACKAGED_SOURCES = {
    "packaged:minilm": packaged.minilm_path,
    "packaged:dinov2-small": packaged.dinov2_small_path,
}
DATA_ARGUMENTS = ("calibration_data", "evaluation_data", "ood_evaluation_data", "data")


def load_recipe(name: str) -> dict[str, Any]:
    path = RECIPES / f"{name}.json"
    if not path.is_file():
        known = sorted(p.stem for p in RECIPES.glob("*.json"))
        raise SystemExit(f"No recipe {path}; recipes: {known}")
    return json.loads(path.read_text())


def recipe_listing() -> str:
    """One line per recipe: its name, what it converts to which norm_type, and where it is published."""
    lines = []
    for path in sorted(RECIPES.glob("*.json")):
        recipe = json.loads(path.read_text())
        healed = " + heal" if "heal" in recipe else ""
        lines.append(f"  {path.stem:<28} {recipe['source']} -> {recipe['convert']['norm_type']}{healed}"
                     f" -> {recipe['repo_id']}")  # fmt: skip
    return "recipes (conversions/NAME.json):\n" + "\n".join(lines)


def packaged_data(reference: str, data_dir: Path) -> str:
    """Write `packaged:<key>:<split>:<count>` under `data_dir` (once) and return its path; other values unchanged."""
    if not reference.startswith("packaged:") or reference == "packaged":
        return reference
    if reference.count(":") == 2:  # out-of-domain data has no split
        _, key, count = reference.split(":")
        return out_of_domain_data(key, int(count), data_dir)
    _, key, split, count = reference.split(":")
    count = int(count)
    target = data_dir / f"{key}-{split}-{count}"
    if key == "bbc_news":
        target = target.with_suffix(".txt")
        if not target.is_file():
            train, test = packaged.split_train_test(packaged.bbc_news(), test_fraction=0.2, seed=0)
            texts = [" ".join(text.split()) for text, _ in (train if split == "train" else test)[:count]]
            write_atomically(target, "\n".join(texts) + "\n")
    elif key == "fashion_mnist":
        if not target.is_dir():
            images, _ = packaged.fashion_mnist(split, limit=count)
            staging = target.with_name(f".{target.name}.partial")
            staging.mkdir(parents=True, exist_ok=True)
            for index, image in enumerate(images):
                Image.fromarray(image).save(staging / f"{index:05d}.png")
            staging.rename(target)
    else:
        raise SystemExit(f"Unknown packaged data {reference!r}: use bbc_news or fashion_mnist.")
    return str(target)


def out_of_domain_data(key: str, count: int, data_dir: Path) -> str:
    """Write `packaged:python_docs:<count>` (a .txt file, one paragraph a line) or `packaged:digits:<count>` (PNG
    files) under `data_dir` as `<key>-<count>` (once) and return its path."""
    target = data_dir / f"{key}-{count}"
    if key == "python_docs":
        target = target.with_suffix(".txt")
        if not target.is_file():
            write_atomically(target, "\n".join(packaged.python_docs_paragraphs(count)) + "\n")
    elif key == "digits":
        if not target.is_dir():
            staging = target.with_name(f".{target.name}.partial")
            staging.mkdir(parents=True, exist_ok=True)
            for index, image in enumerate(packaged.digits_images(count)):
                image.save(staging / f"{index:05d}.png")
            staging.rename(target)
    else:
        raise SystemExit(f"Unknown out-of-domain data packaged:{key}:{count}: use python_docs or digits.")
    return str(target)


def write_atomically(target: Path, text: str) -> None:
    """Write `text` to a sibling file, then rename it to `target`: a run reading it at the same time never sees it
    half written."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(target)


def attach_fine_tuning(folder: Path, record: dict[str, Any]) -> None:
    """Write the recipe's fine-tuning `record` into the report in `folder`, saying so when it was measured on other
    weights than the folder's."""
    weights = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    if record.get("weights_sha256") != weights:
        record = {**record, "description": f"{record['description']} (measured on an earlier build of this recipe, "
                  f"weights sha256 {record.get('weights_sha256', 'unknown')[:12]}, not on these weights)"}  # fmt: skip
    if read_report(folder).get("fine_tuning") != record:
        record_fine_tuning(folder, record)


def set_config_fields(folder: Path, fields: dict[str, Any]) -> None:
    """Write the recipe's `config` fields into `folder`'s config.json (sorted keys, as `save_pretrained` writes it).

    A recipe changes values, never adds fields: each must be in config.json already, with a value of the same kind
    (a number for a number, a bool for a bool, ...), and the result must pass the checks every checkpoint's config gets
    (`check_config_values`: dropout probabilities in [0, 1), ...); otherwise a `ConversionError` and nothing written."""
    path = folder / "config.json"
    config = read_json_object(path, "rebuild the checkpoint with --overwrite")
    for name, value in fields.items():
        if name not in config or not same_kind(value, config[name]):
            raise ConversionError(
                f"{path}: the recipe sets {name}={value!r}, but the checkpoint's config "
                + (f"has {name}={config[name]!r}" if name in config else f"has no {name}")
                + "; a recipe may only change the value of a field the config has, keeping its kind."
            )
    updated = {**config, **fields}
    check_config_values(updated, path)
    if updated != config:
        write_atomically(path, json.dumps(updated, indent=2, sort_keys=True, allow_nan=False) + "\n")


def same_kind(value: Any, current: Any) -> bool:
    """Whether `value` may replace `current` in a config: numbers for numbers (not bools), else the same JSON type."""

    def kind(v):
        return "number" if isinstance(v, (int, float)) and not isinstance(v, bool) else type(v)

    return current is None or kind(value) == kind(current)


def with_data(arguments: dict[str, Any], data_dir: Path) -> dict[str, Any]:
    return {k: packaged_data(v, data_dir) if k in DATA_ARGUMENTS else v for k, v in arguments.items()}


def build(name: str, recipe: dict[str, Any], work: Path, overwrite: bool) -> Path:
    """Convert (and heal) the recipe's checkpoint into `<work>/<name>`, unless it is there already."""
    folder = work / name
    if folder.is_dir() and not overwrite:
        logging.info("%s: reusing %s (pass --overwrite to rebuild)", name, folder)
        return folder
    source = recipe["source"]
    source = str(PACKAGED_SOURCES[source]()) if source in PACKAGED_SOURCES else source
    arguments = with_data(recipe["convert"], work / "data")
    convert(source, arguments.pop("norm_type"), folder, overwrite=overwrite, progress=True, **arguments)
    if "heal" in recipe:
        healing = with_data(recipe["heal"], work / "data")
        heal(folder, healing.pop("data"), progress=True, **healing)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, epilog=recipe_listing(), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("names", nargs="*", help="recipes to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the recipes and exit")
    parser.add_argument("--work", type=Path, default=packaged.cache_root() / "conversions", help="build folder")
    parser.add_argument("--render-only", action="store_true", help="re-render cards from checkpoints already built")
    parser.add_argument("--overwrite", action="store_true", help="rebuild checkpoints that exist")
    parser.add_argument("--push", action="store_true", help="upload each checkpoint with its card")
    parser.add_argument("--endpoint", help="Hub endpoint for --push (default: HF_ENDPOINT)")
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.list:
        print(recipe_listing())
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    with handled_errors("conversions/run.py") as outcome:
        names = args.names or sorted(p.stem for p in RECIPES.glob("*.json"))
        CARDS.mkdir(exist_ok=True)
        for name in names:
            recipe = load_recipe(name)
            folder = args.work / name
            if args.render_only and not folder.is_dir():
                raise SystemExit(f"{folder} is not built yet: run without --render-only first.")
            if not args.render_only:
                folder = build(name, recipe, args.work, args.overwrite)
            set_config_fields(folder, recipe.get("config", {}))
            if "fine_tuning" in recipe:
                attach_fine_tuning(folder, recipe["fine_tuning"])
            card = model_card_for_folder(folder, recipe["repo_id"], **recipe.get("card", {}))
            (CARDS / f"{name}.md").write_text(str(card), encoding="utf-8")
            logging.info("%s: card written to %s", name, CARDS / f"{name}.md")
            if args.push:
                commit = push_to_hub(folder, recipe["repo_id"], endpoint=args.endpoint, **recipe.get("card", {}))
                logging.info("%s: pushed to %s (commit %s)", name, recipe["repo_id"], commit.oid)

    return outcome.status


if __name__ == "__main__":
    sys.exit(main())
