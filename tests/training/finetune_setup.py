"""Tiny fine-tuning setups shared by the tests of `hf_norms.training.finetune`: a few-step CPU `TrainingArguments` and
the model and data arguments of a 2-layer ViT/DeiT/BERT on packaged data."""

from __future__ import annotations

from transformers import TrainingArguments

from hf_norms.training.finetune import DataArguments, ModelArguments

TINY_VISION = (
    "image_size=28,patch_size=7,num_channels=1,hidden_size=32,num_hidden_layers=2,num_attention_heads=4,"
    "intermediate_size=64"
)
TINY_BERT = "hidden_size=32,num_hidden_layers=2,num_attention_heads=4,intermediate_size=64,max_position_embeddings=128"
NO_DROPOUT = ",hidden_dropout_prob=0.0,attention_probs_dropout_prob=0.0"


def training_args(output_dir, **overrides) -> TrainingArguments:
    options = dict(
        output_dir=str(output_dir),
        use_cpu=True,
        max_steps=4,
        per_device_train_batch_size=8,
        per_device_eval_batch_size=16,
        learning_rate=3e-3,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
        data_seed=0,
    )
    options.update(overrides)
    return TrainingArguments(**options)


def tiny_model_args(family: str, norm_type: str, extra: str = NO_DROPOUT, minilm_dir=None) -> ModelArguments:
    if family == "bert":
        return ModelArguments(
            model_type="bert_norm",
            norm_type=norm_type,
            config_overrides=TINY_BERT + extra,
            tokenizer_name=str(minilm_dir),
        )
    return ModelArguments(model_type=f"{family}_norm", norm_type=norm_type, config_overrides=TINY_VISION + extra)


def tiny_data_args(family: str, **overrides) -> DataArguments:
    options = dict(max_train_samples=48, max_eval_samples=24)
    if family == "bert":
        options.update(dataset="packaged:bbc-news", max_seq_length=64)
    else:
        options.update(dataset="packaged:fashion-mnist")
    options.update(overrides)
    return DataArguments(**options)
