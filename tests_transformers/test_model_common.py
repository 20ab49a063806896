"""transformers' `ModelTesterMixin` for every family x norm_type (see conftest.py for where it comes from).

Each family has a model tester of its own here (sizes in the spirit of transformers' testers: 2 layers, 32 wide, 4
heads); the test classes are made for every `norm_type` of the registry. A test whose assumption the mathematics of a
norm breaks is skipped with the reason (`SKIPS`, listed in docs/models.md); nothing else is.
"""

from __future__ import annotations

import unittest

import torch
from tftests.test_modeling_common import ModelTesterMixin, floats_tensor, ids_tensor, random_attention_mask

import hf_norms
from hf_norms.models.clip_vision.modeling_clip_vision_norm import CLIPVisionNormModelWithProjection
from hf_norms.models.family_registry import FAMILIES as FAMILY_REGISTRY
from hf_norms.models.family_registry import MODEL_CLASSES
from hf_norms.norms.registry import NORM_TYPES


class VisionTester:
    """The image families: 30 x 30 images in 2 x 2 patches (a 15 x 15 grid) after the prefix tokens."""

    def __init__(self, parent, config_class, norm_type: str, num_prefix_tokens: int):
        self.parent, self.config_class, self.norm_type = parent, config_class, norm_type
        self.batch_size, self.image_size, self.patch_size, self.num_channels = 13, 30, 2, 3
        self.hidden_size, self.num_hidden_layers, self.num_attention_heads = 32, 2, 4
        self.is_training, self.num_labels = True, 3
        num_patches = (self.image_size // self.patch_size) ** 2
        self.seq_length = num_patches + num_prefix_tokens
        self.mask_length, self.num_masks = num_patches, num_patches // 2

    def get_config(self):
        sizes = {"mlp_ratio": 2} if hasattr(self.config_class(), "mlp_ratio") else {"intermediate_size": 37}
        return self.config_class(
            norm_type=self.norm_type, image_size=self.image_size, patch_size=self.patch_size,
            num_channels=self.num_channels, hidden_size=self.hidden_size, num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
            num_labels=self.num_labels, **sizes, **({"encoder_stride": 2} if "intermediate_size" in sizes else {}),
        )  # fmt: skip

    def prepare_config_and_inputs_for_common(self):
        pixel_values = floats_tensor([self.batch_size, self.num_channels, self.image_size, self.image_size])
        return self.get_config(), {"pixel_values": pixel_values}


class TextTester:
    """The text families: 7 tokens ([CLS] or <s> and a row of 6), padded at random."""

    def __init__(self, parent, config_class, norm_type: str, num_prefix_tokens: int):
        self.parent, self.config_class, self.norm_type = parent, config_class, norm_type
        self.batch_size, self.seq_length, self.vocab_size = 13, 7, 99
        self.hidden_size, self.num_hidden_layers, self.num_attention_heads = 32, 2, 4
        self.is_training, self.num_labels, self.num_choices = True, 3, 4

    def get_config(self):
        return self.config_class(
            norm_type=self.norm_type,
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            intermediate_size=37,
            hidden_dropout_prob=0.1,
            attention_probs_dropout_prob=0.1,
            max_position_embeddings=512,
            type_vocab_size=16,
        )  # fmt: skip (two labels, the default: the question-answering head reads start and end logits)

    def prepare_config_and_inputs_for_common(self):
        # ordinary tokens only: RoBERTa numbers positions by its pad id (1), which stock RoBERTa sees as padding
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size - 3) + 3
        inputs = {
            "input_ids": input_ids,
            "token_type_ids": ids_tensor([self.batch_size, self.seq_length], 16),
            "attention_mask": random_attention_mask([self.batch_size, self.seq_length]),
        }
        return self.get_config(), inputs


# each family by its class-name prefix (`Bert`), with its config and the tester of its modality
FAMILIES = {
    spec.class_prefix: (spec.config_class, VisionTester if spec.modality == "image" else TextTester)
    for spec in FAMILY_REGISTRY.values()
}
# test name prefix -> (the norm types whose mathematics or design breaks its assumption, why)
SKIPS: dict[str, tuple[frozenset[str], str]] = {
    "test_training_gradient_checkpointing_use_reentrant_true": (
        frozenset({"lape"}),
        "LaPE adds each layer's position embedding from outside the layer's inputs, which reentrant checkpointing "
        "does not differentiate: hf-norms refuses use_reentrant=True for LaPE (non-reentrant, the default, trains it)",
    ),
    "test_feed_forward_chunking": (
        frozenset(kind for kind, spec in NORM_TYPES.items() if spec.whole_sequence),
        "BERT's feed-forward chunks run the norm after it on chunks of tokens, and DTN and SepNorm need the whole "
        "sequence (where the prefix tokens are, the other tokens' statistics): their configs refuse chunking",
    ),
    "test_reverse_loading_mapping": (
        frozenset(NORM_TYPES),
        "hf-norms saves the runtime key layout on purpose: from the 4.x layout transformers writes by default, the "
        "Trainer's best-model reload and resume load nothing (transformers#43701; tests/training/test_finetune.py)",
    ),
}


def skip_reason(test_name: str, norm_type: str) -> str | None:
    for prefix, (norm_types, reason) in SKIPS.items():
        if test_name.startswith(prefix) and norm_type in norm_types:
            return reason
    return None


def vision_input_embeddings(self):
    """As transformers' own vision model tests: the input embeddings are the patch embeddings, no lookup table."""
    config, _ = self.model_tester.prepare_config_and_inputs_for_common()
    for model_class in self.all_model_classes:
        model = model_class(config)
        self.assertIsInstance(model.get_input_embeddings(), torch.nn.Module)
        output = model.get_output_embeddings()
        self.assertTrue(output is None or isinstance(output, torch.nn.Linear))


def text_inputs_for_class(self, inputs_dict, model_class, return_labels=False):
    """The common inputs, and for BERT's pre-training head its two labels (masked tokens and next sentence)."""
    inputs = ModelTesterMixin._prepare_for_class(self, inputs_dict, model_class, return_labels=return_labels)
    if return_labels and model_class is hf_norms.BertNormForPreTraining:
        batch, length = self.model_tester.batch_size, self.model_tester.seq_length
        inputs["labels"] = torch.zeros((batch, length), dtype=torch.long)
        inputs["next_sentence_label"] = torch.zeros(batch, dtype=torch.long)
    return inputs


def without_the_teacher(method_name: str):
    """transformers' `method_name` on DeiT's classes but its classifier with teacher, which has no loss (as
    transformers' own DeiT tests leave it out of training and loss tests)."""

    def run(self, *args, **kwargs):
        teacher = hf_norms.DeiTNormForImageClassificationWithTeacher
        self.all_model_classes = tuple(c for c in type(self).all_model_classes if c is not teacher)
        return getattr(ModelTesterMixin, method_name)(self, *args, **kwargs)

    return run


def without_the_projection(method_name: str):
    """transformers' `method_name` on CLIP vision's classes but `CLIPVisionNormModelWithProjection`, which returns no
    loss to train on (tests/models/test_family_clip_vision.py trains it on its outputs)."""

    def run(self, *args, **kwargs):
        self.all_model_classes = tuple(
            c for c in type(self).all_model_classes if c is not CLIPVisionNormModelWithProjection
        )
        return getattr(ModelTesterMixin, method_name)(self, *args, **kwargs)

    return run


def make_test_class(family: str, norm_type: str) -> type:
    config_class, tester_class = FAMILIES[family]
    classes = tuple(c for c in MODEL_CLASSES.values() if c.config_class is config_class)

    def set_up(self):
        self.model_tester = tester_class(self, config_class, norm_type, config_class.num_prefix_tokens)
        reason = skip_reason(self._testMethodName, norm_type)
        if reason:
            self.skipTest(reason)

    namespace = {
        "all_model_classes": classes,
        "test_resize_embeddings": tester_class is TextTester,
        "setUp": set_up,
        "__module__": __name__,
    }
    if tester_class is VisionTester:
        namespace["test_model_get_set_embeddings"] = vision_input_embeddings
    else:
        namespace["_prepare_for_class"] = text_inputs_for_class
        # transformers' generation tests are not in its source distribution: BERT's causal LM head is not run there
        namespace["all_generative_model_classes"] = ()
    if family == "Dinov2":  # its mask token is used only with `bool_masked_pos`, as in the stock model
        namespace["test_all_params_have_gradient"] = False
    if family == "CLIPVision":  # its projection head has no Auto class (none in transformers either) and no loss
        namespace["all_model_classes"] = (*classes, CLIPVisionNormModelWithProjection)
        for method_name in ("test_training", "check_training_gradient_checkpointing"):
            namespace[method_name] = without_the_projection(method_name)
    if family == "DeiT":
        for method_name in ("test_training", "test_problem_types", "check_training_gradient_checkpointing"):
            namespace[method_name] = without_the_teacher(method_name)
    return type(
        f"{family}Norm{NORM_TYPES[norm_type].short_name}ModelTest", (ModelTesterMixin, unittest.TestCase), namespace
    )


for _family in FAMILIES:
    for _norm_type in NORM_TYPES:
        _test_class = make_test_class(_family, _norm_type)
        globals()[_test_class.__name__] = _test_class
del _family, _norm_type, _test_class
torch.manual_seed(0)
