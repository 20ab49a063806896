"""The options of `hf-norms push` and of a model card, each declared once: the command line parses them,
`push_to_hub(folder, repo_id, **options)` and `model_card_for_folder(folder, repo_id, **options)` take them, the card
reads them. Imports neither torch nor transformers.

`PushArguments` checks itself when it is made, so a push refuses before anything is read, created or sent: every
option's type (a token that is not a string is never handed to the redaction, which would keep it), the order of
the repo id and the folder (`check_push_order`), the repo id (`check_repo_id`), the branch
(`check_revision`: a name git and the Hub both take) and the card's options (`check_card_options`: the rules the Hub's
`/api/validate-yaml` applies, `hf_norms.hub.server.card_rules`). A mistake is one line (`CheckpointRefused`, or
`ArgumentTypeError` for a wrong type), exit status 2 on the command line.
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import typing
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from ..cli_parsing import flag, option, required
from ..errors import ArgumentTypeError, CheckpointRefused, HubError, require_type
from .server.card_rules import metadata_problems
from .server.payloads import check_name

TOKEN_HELP = "Hub token (default: HF_TOKEN, else the login stored by `hf auth login`); never printed"
LISTS = ("include", "include_skipped", "exclude", "delete_patterns", "datasets", "tags", "notes")  # language: as given
PATHS = ("conversion_report",)  # options that also take a path object
# the card's metadata fields an option sets
CARD_FIELDS = ("license", "base_model", "language", "datasets", "tags")
# a branch name git accepts (`git check-ref-format --branch`): no control characters, spaces or `~^:?*[\`, no `..`,
# `//`, `@{`, no component starting with `.`, not ending in `/`, `.` or `.lock`, not starting with `-`
BRANCH_NAME = re.compile(r"(?!-|/|.*(?:\.\.|//|@\{|/\.|\.lock$|[/.]$))(?!\.)[^\x00-\x20\x7f~^:?*\[\\]+")


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
        check_types(self)


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
    include_skipped: list[str] | None = option(
        "also upload this file even where push cannot read it in full (an unknown or opaque format), never one "
        "holding a secret or the token; the card names it (repeatable)",
        repeatable=True, metavar="PATH",
    )  # fmt: skip
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
    quiet: bool = option("print only the commit URL: no INFO lines, no progress bars (as `hf upload --quiet`)", False)

    def __post_init__(self) -> None:
        require_type("folder", self.folder, (str, os.PathLike), "the checkpoint folder to upload")
        require_type("repo_id", self.repo_id, str, "a Hub repo id such as my-org/vit-dyt")
        check_push_order(self.repo_id, os.fspath(self.folder))
        check_repo_id(self.repo_id)
        super().__post_init__()
        check_revision(self.revision)
        check_card_options(self)

    def card(self) -> CardArguments:
        """The card's arguments alone."""
        return CardArguments(**{name: getattr(self, name) for name in CardArguments.__dataclass_fields__})


# keywords that are not options, with what to give instead
INSTEAD = {"use_auth_token": "give token=... instead"}


def push_arguments(caller: str, **options: Any) -> PushArguments:
    """The `PushArguments` of `options` (`folder`, `repo_id` and the options); a keyword that is no option is refused
    in one line naming it and, where one is close, the option meant."""
    known = [field.name for field in fields(PushArguments)]
    unknown = [name for name in options if name not in known]
    if unknown:
        hints = {name: INSTEAD.get(name) or closest(name, known) for name in unknown}
        named = ", ".join(f"{name} ({hint})" if hint else name for name, hint in hints.items())
        raise ArgumentTypeError(
            f"{caller} does not take {named}; it takes {', '.join(name for name in known if name != 'folder')}."
        )
    return PushArguments(**options)


def closest(name: str, known: list[str]) -> str | None:
    """'did you mean X?' for the option spelled most like `name`, if one is close."""
    matches = difflib.get_close_matches(name, known, n=1)
    return f"did you mean {matches[0]}?" if matches else None


def check_types(arguments: CardArguments) -> None:
    """Raise `ArgumentTypeError`, in one line, for an option whose value is not of its declared type (a list option
    also takes one string). The token's value is never shown."""
    declared = typing.get_type_hints(type(arguments))  # not `field.type`, which HfArgumentParser rewrites
    for field in fields(arguments):
        name, value, kind = field.name, getattr(arguments, field.name), declared[field.name]
        if name == "token":
            if not isinstance(value, (str, type(None))):
                raise ArgumentTypeError(f"token must be a string (a Hub token) or None, got {type(value).__name__}.")
        elif kind is bool:
            require_type(name, value, bool, "True or False")
        elif kind == str | None:
            kinds = (str, os.PathLike, type(None)) if name in PATHS else (str, type(None))
            require_type(name, value, kinds, "a string or None")
        elif kind == list[str] | None and value is not None and not isinstance(value, str):
            require_type(name, value, (list, tuple), "a string or a list of strings")
            for item in value:
                require_type(name, item, str, "a string or a list of strings")


def check_repo_id(repo_id: str) -> None:
    """Refuse, in one line, a repo id that huggingface_hub refuses (`validate_repo_id`), e.g. `../evil`, or the Hub
    does (`hub_takes`: ASCII, each part starting with a letter or digit), before the repo is created."""
    try:
        validate_repo_id(repo_id)
        taken = all(map(hub_takes, repo_id.split("/")))
    except HFValidationError:
        taken = False
    if not taken:
        raise CheckpointRefused(
            f"{repo_id!r:.120} is not a Hub repo id: give `name` or `namespace/name` (ASCII letters, digits, '-', '_', "
            "'.', each part starting with a letter or digit; at most 96 characters; no '--' or '..'; not ending in "
            "'.git'), e.g. my-org/vit-dyt."
        )


def check_push_order(repo_id: str, folder: str) -> None:
    """Refuse a repo id that is a folder with a folder that is not (`hf-norms push DIR REPO_ID`, the order of hf-norms
    0.1)."""
    if Path(repo_id).is_dir() and not Path(folder).is_dir():
        raise CheckpointRefused(
            f"{repo_id!r} is a folder and {folder!r} is not: the order is REPO_ID LOCAL_PATH, as in `hf upload`; run "
            f"`hf-norms push {shlex.quote(folder)} {shlex.quote(repo_id)}` (in Python: repo_id={folder!r}, "
            f"folder={repo_id!r})."
        )


def check_folder(folder: str | os.PathLike) -> None:
    """Refuse a folder to push that does not exist or is a file (reading no file; the command line checks it before it
    imports torch, `publish` before it reads the folder)."""
    folder = Path(folder)
    if not folder.exists():
        raise CheckpointRefused(f"{folder} does not exist; give the folder a model was saved to.")
    if not folder.is_dir():
        raise CheckpointRefused(f"{folder} is not a folder; give the folder a model was saved to.")


def check_revision(revision: str | None) -> None:
    """Refuse, in one line, a branch name that git (`BRANCH_NAME`) or the Hub (the loopback Hub's `check_name`:
    ASCII, at most 96 characters, no `refs/...`) refuses, before anything is created."""
    if revision is not None and not (hub_takes(revision) and BRANCH_NAME.fullmatch(revision)):
        raise CheckpointRefused(
            f"{revision!r:.80} is not a branch name: give one the Hub and git take (ASCII letters, digits, '.', '_' and "
            "'-', starting with a letter or digit, at most 96 characters; no '/' (refs/... is not a branch), no '..', "
            "not ending in '.' or '.lock'), e.g. dev. Nothing was created."
        )


def hub_takes(name: str) -> bool:
    """Whether the Hub takes `name` as a namespace, repo or branch name (the loopback Hub's `check_name`)."""
    try:
        check_name(name, "name")
    except HubError:
        return False
    return True


def check_card_options(card: CardArguments) -> None:
    """Refuse, in one line naming the option, a card option the Hub refuses in a card's metadata (an unknown license, a
    base model that is no repo id, ...: `card_rules.metadata_problems`), before anything is created."""
    for name in CARD_FIELDS:
        value = getattr(card, name)
        problems = metadata_problems({name: value}, "model") if value is not None else []
        if problems:
            raise CheckpointRefused(
                f"{flag(card, name)}: {problems[0]} The Hub would refuse the card; give a value it takes. Nothing was "
                "created."
            )
