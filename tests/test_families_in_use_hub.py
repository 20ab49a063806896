"""The new families pushed as their users would (issue 46, "try it as its users would"), to a loopback Hub: a saved
CLIP projection head, which has no Auto class, is refused in one line that says what to publish instead."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch
from huggingface_hub import HfApi
from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModelWithProjection

import hf_norms
from hf_norms import cli

TOKEN = "hf_families-in-use-secret-8812"
CLIP_VISION = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4, image_size=30,
                   patch_size=2, projection_dim=16)  # fmt: skip

pytestmark = pytest.mark.usefixtures("hub_online")


def tree_digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*")
            if p.is_file()}  # fmt: skip


def test_push_of_the_clip_projection_head_names_the_bare_model_to_publish(api: HfApi, tmp_path, capsys, monkeypatch):
    """push said "'CLIPVisionNormModelWithProjection', which is not an hf-norms model class; save the model again with
    hf_norms", which no save mends: the class is hf-norms' own but has no Auto class, so a load by id could not find
    it. The line says so and names the bare model; exit 2, no repo, the folder unchanged; the bare model pushes."""
    monkeypatch.setenv("HF_ENDPOINT", api.endpoint)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    torch.manual_seed(0)
    stock = tmp_path / "stock"
    CLIPVisionModelWithProjection(CLIPVisionConfig(**CLIP_VISION)).save_pretrained(stock)
    folder = tmp_path / "projection"
    hf_norms.CLIPVisionNormModelWithProjection.from_pretrained(stock, norm_type="sepnorm").save_pretrained(folder)
    before = tree_digest(folder)
    assert cli.main(["push", "me/projection", str(folder)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"hf-norms push: error: {folder / 'config.json'} names the architecture 'CLIPVisionNormModelWithProjection', "
        "an hf-norms class that no Auto class maps, so a load by id could not find it; publish the bare model: load "
        "the folder with hf_norms.CLIPVisionNormModel.from_pretrained and save it."
    )
    assert "me/projection" not in {model.id for model in api.list_models()} and tree_digest(folder) == before
    bare = tmp_path / "bare"
    hf_norms.CLIPVisionNormModel.from_pretrained(folder).save_pretrained(bare)
    CLIPImageProcessor(size={"shortest_edge": 30}, crop_size=30).save_pretrained(bare)
    assert cli.main(["push", "me/bare", str(bare)]) == 0
    assert "me/bare" in {model.id for model in api.list_models()}
