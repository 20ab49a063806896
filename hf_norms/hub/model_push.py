"""`model.push_to_hub(repo_id)` of an hf-norms model: the same checks, files and card as `hf-norms push`.

transformers' `PushToHubMixin.push_to_hub` saves the model to a temporary folder and uploads it with its stock card
("[More Information Needed]", no norm_type, no pipeline_tag). Once `import hf_norms` has run, every hf-norms model
class hands the call to `push_model` instead (`NormPreTrainedMixin.hub_publisher`, set by
`hf_norms.install_hub_publisher`; remote code run without hf-norms keeps transformers' push): the model is saved
to a temporary folder with what the folder it was loaded from holds beside its weights (tokenizer or image processor,
conversion report), and that folder is published by `publish`, so the card is the one `hf-norms push` renders and
names the base model, license and language the Trainer's card would (`card_facts.source_lineage`).
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
from pathlib import Path
from typing import Any

from huggingface_hub import CommitInfo

from ..errors import CheckpointRefused
from ..output_folders import copy_checkpoint_files
from .arguments import push_arguments
from .card_facts import REPORT_NAME, source_lineage
from .publish import publish
from .upload_files import PROCESSOR_FILES, TOKENIZER_FILES

logger = logging.getLogger(__name__)

# what a push takes from the folder the model was loaded from, beside the weights save_pretrained writes
BESIDE_THE_WEIGHTS = (*TOKENIZER_FILES, *PROCESSOR_FILES, REPORT_NAME, "conversion_report.md", "conversion_report.png")
# keywords of transformers' push_to_hub that a single hf-norms commit cannot honour, when given a true value
UNSUPPORTED = {"create_pr": "push to a branch with revision=... instead", "commit_description": "give commit_message"}
# earlier transformers' keywords: the value hf-norms publishes as, and why it takes no other
ONLY_AS = {"safe_serialization": (True, "hf-norms publishes safetensors weights only: pickled weights run code when "
                                        "loaded")}  # fmt: skip


def push_model(model: Any, repo_id: str, *, max_shard_size: int | str | None = "50GB", **options: Any) -> CommitInfo:
    """Publish `model` to `repo_id` as `hf_norms.push_to_hub` publishes a folder; returns the `CommitInfo`.

    `options` are transformers' `push_to_hub` keywords (`commit_message`, `private`, `token`, `revision`, `tags`,
    `safe_serialization=True`; `create_pr`, `commit_description` and `safe_serialization=False` are refused in one
    line) and the fields of `PushArguments` (`license`, `base_model`, `notes`, `endpoint`, ...), which take precedence
    over what the source folder says; every option is checked (`push_arguments`) before the model is saved.
    """
    refused = [f"{name} ({why})" for name, why in UNSUPPORTED.items() if options.pop(name, None)]
    refused += [f"{name}={value!r} ({why})" for name, (only, why) in ONLY_AS.items()
                if (value := options.pop(name, only)) is not only]  # fmt: skip
    if refused:
        raise CheckpointRefused(
            f"hf-norms pushes a model in one commit to a branch; not supported: {', '.join(refused)}. Nothing was "
            "created."
        )
    if isinstance(options.get("token"), bool):  # transformers' token=True: the stored login
        options["token"] = None
    options["private"] = bool(options.get("private"))
    loaded_from = str(getattr(model, "name_or_path", "") or "")
    given = push_arguments("model.push_to_hub()", folder=".", repo_id=repo_id, **options)  # before any request
    lineage = source_lineage(loaded_from, repo_id, given.token, given.endpoint) if loaded_from else {}
    defaults = {key: value for key, value in lineage.items() if value}
    arguments = push_arguments("model.push_to_hub()", folder=".", repo_id=repo_id, **{**defaults, **options})
    with tempfile.TemporaryDirectory(prefix="hf-norms-model-push-") as staging:
        model.save_pretrained(staging, max_shard_size=max_shard_size)
        source = Path(loaded_from)
        if loaded_from and source.is_dir():
            beside = [name for name in BESIDE_THE_WEIGHTS if (source / name).is_file()]
            copy_checkpoint_files(source, Path(staging), beside)
        return publish(dataclasses.replace(arguments, folder=staging), processor=False)
