"""Converted checkpoints of each family for the publishing tests: the real MiniLM (DyT), a tiny ViT (DTN) and DeiT with
teacher (LaPE) measured on real photos, each with the repo id, Auto class and pipeline task it is published for; and
folder copies and hashes to compare a push against."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import torch
from test_model_card import MINILM_ID, convert_minilm
from transformers import (
    DeiTConfig,
    DeiTForImageClassificationWithTeacher,
    ViTConfig,
    ViTForImageClassification,
    ViTImageProcessorPil,
)

import hf_norms
from hf_norms import packaged
from hf_norms.hub.card_facts import REPORT_NAME

IMAGE_SIZE = 32


def photo_batch(processor) -> torch.Tensor:
    photos = packaged.photos()
    return processor(images=[photos["astronaut"], photos["coffee"], photos["chelsea"]], return_tensors="pt")[
        "pixel_values"
    ]


@torch.no_grad()
def logit_fidelity(converted, source, pixels) -> dict:
    """End-to-end fidelity of a converted classifier to its source on real photos."""
    mine, theirs = converted(pixel_values=pixels).logits, source(pixel_values=pixels).logits
    log_p, log_q = theirs.log_softmax(-1), mine.log_softmax(-1)
    return {
        "max_abs_diff": (mine - theirs).abs().max().item(),
        "mean_cosine": torch.nn.functional.cosine_similarity(mine, theirs).mean().item(),
        "top1_agreement": (mine.argmax(-1) == theirs.argmax(-1)).float().mean().item(),
        "kl_divergence": (log_p.exp() * (log_p - log_q)).sum(-1).mean().item(),
    }


def convert_tiny_vision(root: Path, family: str, norm_options: dict, exact: bool) -> Path:
    """A small stock ViT/DeiT classifier (random weights: no package ships DeiT weights), converted and measured on real
    photos; saved with its image processor and report."""
    torch.manual_seed(0)
    common = dict(image_size=IMAGE_SIZE, patch_size=8, hidden_size=48, num_hidden_layers=2, num_attention_heads=4)
    common.update(intermediate_size=96, num_labels=3, id2label={0: "cat", 1: "cup", 2: "person"})
    stock_class, norm_class = {
        "vit": (ViTForImageClassification, hf_norms.ViTNormForImageClassification),
        "deit": (DeiTForImageClassificationWithTeacher, hf_norms.DeiTNormForImageClassificationWithTeacher),
    }[family]
    stock = stock_class((ViTConfig if family == "vit" else DeiTConfig)(**common)).eval()
    stock.save_pretrained(root / f"{family}-stock")
    converted = norm_class.from_pretrained(root / f"{family}-stock", **norm_options).eval()
    processor = ViTImageProcessorPil(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    folder = root / f"{family}-{norm_options['norm_type']}"
    converted.save_pretrained(folder)
    processor.save_pretrained(folder)
    report = {
        "hf_norms_version": hf_norms.__version__,
        "source": str(root / f"{family}-stock"),
        "source_revision": None,
        "family": family,
        "architecture": norm_class.__name__,
        "norm_type": norm_options["norm_type"],
        "exact": exact,
        "options": {k: v for k, v in norm_options.items() if k != "norm_type"},
        "folded": False,
        "calibration": None,
        "healing": None,
        "evaluation": {"data": "scikit-image photos", "samples": 3},
        "stages": {
            "exact" if exact else "naive": {"end_to_end": logit_fidelity(converted, stock, photo_batch(processor))}
        },
    }
    (folder / REPORT_NAME).write_text(json.dumps(report))
    return folder


def make_checkpoints(minilm_dir: Path, root: Path) -> dict[str, dict]:
    """A converted checkpoint of each family: the real MiniLM (DyT, naive), a ViT (DTN) and a DeiT with teacher
    (LaPE, exact), with the repo id, Auto class and pipeline task each is published for."""
    convert_minilm(minilm_dir, root / "bert-dyt", norm_type="dyt")
    return {
        "bert": dict(
            folder=root / "bert-dyt",
            repo_id="hf-norms/minilm-dyt",
            auto="AutoModel",
            task="feature-extraction",
            base_model=MINILM_ID,
        ),
        "vit": dict(
            folder=convert_tiny_vision(root, "vit", {"norm_type": "dtn"}, exact=False),
            repo_id="hf-norms/vit-dtn",
            auto="AutoModelForImageClassification",
            task="image-classification",
            base_model=None,  # converted from a local stock checkpoint that is on no Hub
        ),
        "deit": dict(
            folder=convert_tiny_vision(root, "deit", {"norm_type": "lape", "lape_keep_input_pe": True}, exact=True),
            repo_id="hf-norms/deit-lape",
            auto="AutoModelForImageClassification",
            task="image-classification",
            base_model=None,
        ),
    }


def copy_of(folder: Path, tmp_path: Path, name: str = "copy") -> Path:
    target = tmp_path / name
    shutil.copytree(folder, target)
    return target


def snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }
