"""The options of `hf-norms finetune` that are hf-norms' own, as dataclasses for transformers' `HfArgumentParser`:
which model (`ModelArguments`), which data and task (`DataArguments`) and how the output folder may be used
(`OutputArguments`). The Trainer's own are `TrainingArguments`.

This module imports neither torch, transformers nor datasets, so that `hf-norms finetune --help` can render these
options at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..errors import InputError
from ..models.norm_registry import NORM_NAMES

Task = Literal["image-classification", "text-classification", "masked-lm"]


class FinetuneInputError(InputError):
    """Input that cannot be fine-tuned on, found before training starts; the message names the problem and the fix."""


@dataclass
class ModelArguments:
    """Which model to fine-tune: a checkpoint (`model_name_or_path`) or a fresh one (`model_type`)."""

    model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "Checkpoint folder or Hub id: an hf-norms checkpoint, or a stock ViT/DeiT/BERT one."},
    )
    model_type: str | None = field(
        default=None,
        metadata={"help": "Train from scratch: vit_norm, deit_norm or bert_norm (with --config_overrides)."},
    )
    norm_type: str | None = field(
        default=None,
        metadata={"help": f"One of {', '.join(NORM_NAMES)}; a stock checkpoint is converted on loading."},
    )
    config_overrides: str | None = field(
        default=None,
        metadata={"help": "Config fields to set, e.g. 'hidden_size=64,num_hidden_layers=3,dyt_alpha_init=1.0'."},
    )
    normalization_free_defaults: bool = field(
        default=True,
        metadata={
            "help": "For a model with DyT or Derf norms: fine-tune without dropout (those norms pass dropout noise on, "
            "which LayerNorm removed; all-MiniLM-L6-v2 healed to DyT fine-tunes to 0.905 instead of 0.856 on BBC "
            "News), and say so. False keeps the config's dropout; --config_overrides hidden_dropout_prob=... sets it."
        },
    )
    tokenizer_name: str | None = field(
        default=None, metadata={"help": "Tokenizer folder or Hub id (default: the checkpoint's)."}
    )
    image_processor_name: str | None = field(
        default=None,
        metadata={
            "help": "Image processor folder or Hub id (default: the checkpoint's, else resize to image_size and "
            "normalise with mean 0.5, std 0.5)."
        },
    )
    token: str | None = field(
        default=None,
        repr=False,  # never shown where the arguments are printed
        metadata={
            "help": "Hub token for the model, tokenizer, image processor and Hub datasets (default: HF_TOKEN or the "
            "login stored by `hf auth login`). The Trainer's own push uses --hub_token."
        },
    )

    def __post_init__(self) -> None:
        if (self.model_name_or_path is None) == (self.model_type is None):
            raise FinetuneInputError(
                "Give exactly one of model_name_or_path (fine-tune a checkpoint) and model_type (train from scratch)."
            )


@dataclass
class DataArguments:
    """Which data, which task, and how to read it."""

    dataset: str | None = field(
        default=None,
        metadata={
            "help": "packaged:fashion-mnist, packaged:bbc-news, a save_to_disk folder, an imagefolder, a "
            ".csv/.json/.parquet file, or a datasets Hub id (in Python, a Dataset object may be passed instead)."
        },
    )
    task: Task | None = field(
        default=None,
        metadata={"help": "Default: image-classification for ViT/DeiT, text-classification for BERT."},
    )
    dataset_config_name: str | None = field(default=None, metadata={"help": "Hub dataset configuration name."})
    eval_dataset: str | None = field(
        default=None, metadata={"help": "A separate eval source, same forms as --dataset."}
    )
    train_split: str = field(default="train", metadata={"help": "Training split."})
    eval_split: str | None = field(
        default=None, metadata={"help": "Eval split (default: validation, else test, else --eval_fraction of train)."}
    )
    eval_fraction: float = field(
        default=0.1, metadata={"help": "Share of train held out for eval when there is no eval split (0: no eval)."}
    )
    image_column: str = field(default="image", metadata={"help": "Column holding the images."})
    text_column: str = field(default="text", metadata={"help": "Column holding the texts."})
    text_pair_column: str | None = field(default=None, metadata={"help": "Second text column, for sentence pairs."})
    label_column: str = field(default="label", metadata={"help": "Column holding class indices or class names."})
    num_labels: int | None = field(
        default=None, metadata={"help": "Number of classes (default: from the label column); labels must be below it."}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Use a seeded random subset of train."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use a seeded random subset of eval."})
    max_seq_length: int = field(default=128, metadata={"help": "Texts are truncated to this many tokens."})
    image_mode: str | None = field(
        default=None,
        metadata={"help": "Convert images to this PIL mode first (RGB, L); default: require config.num_channels."},
    )
    mlm_probability: float = field(default=0.15, metadata={"help": "Masked-LM: share of tokens masked."})


@dataclass
class OutputArguments:
    """How `--output_dir` may be used (transformers 5 dropped `overwrite_output_dir`; its example scripts' meaning is
    kept, without ever replacing a file hf-norms did not write)."""

    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Train into an --output_dir that already holds an earlier run, or files of yours (none of which "
            "is replaced; a folder holding files with the names a run writes is refused)."
        },
    )
