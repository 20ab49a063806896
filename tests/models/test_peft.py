"""peft on hf-norms models: a LoRA adapter trained on a SepNorm model with its default BatchNorm prefix norm reloads
onto the base model exactly, through peft's own `get_peft_model`, `save_pretrained` and `PeftModel.from_pretrained`."""

from __future__ import annotations

import pytest
import torch
from conftest import image_inputs, text_inputs, tiny_config

import hf_norms

pytestmark = pytest.mark.usefixtures("one_thread")

HEADS = {
    "bert": ("BertNormForSequenceClassification", {"task_type": "SEQ_CLS"}),
    "vit": ("ViTNormForImageClassification", {"modules_to_save": ["classifier"]}),
}


def running_statistics(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: buffer.clone() for name, buffer in model.named_buffers() if "running_" in name}


@pytest.mark.parametrize("family", sorted(HEADS))
def test_lora_on_sepnorm_with_batchnorm_reloads_exactly(family, tmp_path):
    from peft import LoraConfig, PeftModel, get_peft_model

    class_name, task = HEADS[family]
    model_class = getattr(hf_norms, class_name)
    config = tiny_config(family, "sepnorm")
    assert config.sepnorm_prefix_norm == "batchnorm"  # the default for new configs
    torch.manual_seed(0)
    model_class(config).save_pretrained(tmp_path / "base")
    make_inputs = text_inputs if family == "bert" else image_inputs
    inputs = make_inputs(config, with_labels=False)
    labels = torch.tensor([0, 2])

    adapted = get_peft_model(model_class.from_pretrained(tmp_path / "base"), LoraConfig(r=4, lora_alpha=8, **task))
    base_statistics = running_statistics(adapted)
    assert base_statistics
    optimizer = torch.optim.SGD([p for p in adapted.parameters() if p.requires_grad], lr=0.1)
    adapted.train()
    for step in range(3):
        batch = {name: tensor.roll(step, 0) for name, tensor in inputs.items()}
        adapted(**batch, labels=labels.roll(step, 0)).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    adapted.save_pretrained(tmp_path / "adapter")

    reloaded = PeftModel.from_pretrained(model_class.from_pretrained(tmp_path / "base"), tmp_path / "adapter")
    with torch.no_grad():
        trained_logits = adapted.eval()(**inputs).logits
        reloaded_logits = reloaded.eval()(**inputs).logits
    assert (trained_logits - reloaded_logits).abs().max().item() <= 1e-6
    # The frozen base's BatchNorm kept its statistics: what the adapter is applied to is what it was trained on.
    assert all(torch.equal(base_statistics[name], value) for name, value in running_statistics(adapted).items())
