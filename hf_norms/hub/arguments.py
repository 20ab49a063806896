"""The options of `hf-norms push` and of a model card, each declared once: the command line parses them,
`push_to_hub(folder, repo_id, **options)` and `model_card_for_folder(folder, repo_id, **options)` take them, the card
reads them. Imports neither torch nor transformers."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..cli_parsing import option, required
from ..errors import require_type

TOKEN_HELP = "Hub token (default: HF_TOKEN, else the login stored by `hf auth login`); never printed"
LISTS = ("include", "include_skipped", "exclude", "delete_patterns", "datasets", "tags", "notes")  # language: as given


@dataclass(kw_only=True)
class CardArguments:
    """What a model card states that the folder's files cannot know; each takes precedence over what they say."""

    base_model: str | None = option("Hub id of the source checkpoint, when the report names a local copy")
    license: str | None = option("license id for the card (default: the source's, where known)")
    language: list[str] | None = option("a language code for the card (repeatable; default: the source's)",
                                        repeatable=True)  # fmt: skip
    datasets: list[str] | None = option("a Hub dataset id for the card (repeatable)", aliases=["--dataset"],
                                        repeatable=True, metavar="ID")  # fmt: skip
    training_dataset: str | None = option("what a Trainer run in this folder trained and evaluated on")
    tags: list[str] | None = option("a tag for the card (repeatable)", aliases=["--tag"], repeatable=True)
    notes: list[str] | None = option("a sentence for 'How this checkpoint was made' (repeatable)", aliases=["--note"],
                                     repeatable=True)  # fmt: skip
    conversion_report: str | None = option("a conversion report kept elsewhere than the folder", cli=False)

    def __post_init__(self) -> None:
        for name in LISTS:  # one value where a list goes (`language="en"`) is that list
            if isinstance(getattr(self, name, None), str):
                setattr(self, name, [getattr(self, name)])


@dataclass(kw_only=True)
class PushArguments(CardArguments):
    """`hf-norms push REPO_ID [LOCAL_PATH] [...]`, as `hf upload` takes them, and the card's `CardArguments`."""

    repo_id: str = required("e.g. my-org/vit-dyt", positional=True, metavar="REPO_ID")
    folder: str = option(
        "the checkpoint folder (config.json, model.safetensors, ...; default: the current folder)", ".",
        positional=True, metavar="LOCAL_PATH",
    )  # fmt: skip
    include: list[str] | None = option(
        "also upload the files whose path inside the folder matches, e.g. '*.onnx' or 'sub/' (repeatable; read for "
        "the token and for pickles, keys and credentials first)",
        repeatable=True, metavar="GLOB",
    )  # fmt: skip
    include_skipped: list[str] | None = option("also upload this file: the same as --include PATH (repeatable)",
                                               repeatable=True, metavar="PATH")  # fmt: skip
    exclude: list[str] | None = option(
        "do not upload the files whose path inside the folder matches (repeatable; README.md is the card)",
        repeatable=True, metavar="GLOB",
    )  # fmt: skip
    allow_custom_code: bool = option(
        "publish .py files, and configs naming code, that are not hf-norms' own (the card then names them and says "
        "to load with trust_remote_code=False)",
        False,
    )
    delete_patterns: list[str] | None = option("delete matching remote files in the commit (repeatable)",
                                               aliases=["--delete"], repeatable=True, metavar="GLOB")  # fmt: skip
    token: str | None = option(TOKEN_HELP)
    private: bool = option("create the repo private (no effect if it exists)", False)
    revision: str | None = option("branch to commit to (created from main if missing)")
    commit_message: str | None = option("commit title")
    endpoint: str | None = option("Hub endpoint URL (default: HF_ENDPOINT, else huggingface.co)")
    dry_run: bool = option("check and list the files, upload nothing", False)

    def __post_init__(self) -> None:
        require_type("folder", self.folder, (str, os.PathLike), "the checkpoint folder to upload")
        require_type("repo_id", self.repo_id, str, "a Hub repo id such as my-org/vit-dyt")
        super().__post_init__()

    def card(self) -> CardArguments:
        """The card's arguments alone."""
        return CardArguments(**{name: getattr(self, name) for name in CardArguments.__dataclass_fields__})
