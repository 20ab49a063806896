"""Publish a converted or fine-tuned checkpoint folder to a Hub endpoint, with its model card, in one commit.

`push_to_hub(folder, repo_id)` (and `hf-norms push REPO_ID DIR`):

0. checks every input before anything is read, created or sent: each option's type, a branch name git or the Hub
   would refuse and a card option the Hub would refuse (`PushArguments`, when it is made), a repo id that
   huggingface_hub would refuse (`validate_repo_id`), a token shorter than 8 characters, which no leak check could
   protect;
1. picks the files to upload (`hf_norms.hub.upload_files`) by the folder's config.json (an hf-norms model's, else
   refused): what a checkpoint is made of (its sentence-transformers files only where they describe it: a bare
   model, not a head, `card_facts.sentence_transformers_model`), plus what `include` adds, less what `exclude`
   removes; everything else is listed as not uploaded. The folder's own README.md is replaced by the card; a
   symbolic link is uploaded only if it leads to a file inside the folder, and refuses the push otherwise;
2. copies those files, the rest of the checkpoint and the files the card is made of into a private snapshot
   (`upload_files.Snapshot`: regular files only, opened without following links, each read once); everything after
   reads the snapshot, never the folder. `conversion_report.json` and `trainer_state.json`, which record local
   absolute paths (the source, the data, the best checkpoint), are published as copies with each such path cut to
   its last component;
3. refuses a snapshot that is not a loadable hf-norms checkpoint (`check_snapshot`): config, safetensors weights
   that load without missing or unexpected keys, the family's full `auto_map` and every remote-code file it
   reaches, a tokenizer or image processor that loads. The bytes loaded are the bytes uploaded;
4. refuses code that is not hf-norms' own (`hf_norms.hub.remote_code`: a `.py` file that differs from the package's,
   an `auto_map` in any config, a custom pipeline or a sentence-transformers module naming other code), unless
   `allow_custom_code`, which the card then states;
5. renders the card (`hf_norms.hub.model_card`) into the snapshot and refuses it if the Hub would (`check_card`: the
   rules of the Hub's `/api/validate-yaml`, `hf_norms.hub.server.card_rules`), then runs the one check over the
   snapshot (`upload_files.screen_files`): every file, the card included, every name, the commit message, the repo
   id and the branch name, with one list of patterns (every credential format and the token's forms, as they are
   and decoded); what hf-norms never publishes (pickles, keys and credentials, archives it cannot check) is left out
   of a file that is not needed, and refuses the push in the card or a file the checkpoint needs;
6. `HfApi.create_repo(exist_ok=True)` and one `upload_folder` commit of the snapshot's published files: the bytes
   checked are the bytes sent, and the local folder is never written. The snapshot is removed afterwards,
   after a failure too. Nothing on the Hub is deleted unless `delete_patterns` asks.

The endpoint is `endpoint`, else `HF_ENDPOINT`, else huggingface.co; the token is `token`, else `HF_TOKEN` or the
stored login (`hf auth login`). While the push runs, no log record of any logger (hf-norms, huggingface_hub, httpx),
warning or error message holds the token or the stored one (`hf_norms.redaction`). A failure of the network or the
server raises `PushError`; the local folder is untouched and running the same push again completes it.
"""

from __future__ import annotations

import logging
import os
import urllib.parse
from pathlib import Path
from typing import Any

import httpx2
from huggingface_hub import CommitInfo, HfApi, get_token
from huggingface_hub import constants as hub_constants
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

from ..conversion.checkpoint_io import check_weights
from ..conversion.config_checks import check_model_fits, check_source_config
from ..errors import CheckpointRefused, ConversionError, PushError
from ..models.family_registry import MODEL_CLASSES, family_of
from ..norms.registry import STOCK
from ..output_folders import MARKER_NAME
from ..redaction import tokens_redacted
from ..version import VERSION
from .arguments import PushArguments, check_folder, push_arguments
from .card_facts import (
    NORM_MODEL_TYPES,
    gather_card_facts,
    read_json,
    saved_without_pooler,
    sentence_transformers_model,
)
from .model_card import render_model_card
from .remote_code import custom_code, family_code, processor_code
from .server.card_rules import card_problems
from .upload_files import (
    CARD_INPUTS,
    CARD_NAME,
    PROCESSOR_FILES,
    TOKENIZER_FILES,
    Snapshot,
    check_token_length,
    excluded,
    screen_files,
    select_upload_files,
    stating_unread,
)

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------------------------------
# What is in the folder
# --------------------------------------------------------------------------------------------------------------------


def checkpoint_config(folder: Path) -> dict[str, Any]:
    """The config.json of `folder`, refused (CheckpointRefused) unless it is an hf-norms model's."""
    check_folder(folder)
    if not (folder / "config.json").is_file():
        raise CheckpointRefused(
            f"{folder} has no config.json, so it is not a checkpoint; save one with `model.save_pretrained(folder)`."
        )
    try:
        config = read_json(folder / "config.json")
    except (OSError, ValueError) as err:
        raise CheckpointRefused(f"{folder / 'config.json'} is not valid JSON ({err}); save the model again.") from err
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if model_type not in NORM_MODEL_TYPES:
        raise CheckpointRefused(
            f"{folder} holds a {model_type!r} model, not an hf-norms one ({', '.join(NORM_MODEL_TYPES)}); convert it first "
            "(`hf-norms convert`)."
        )
    return config


def check_checkpoint(folder: Path, processor: bool = True) -> tuple[dict[str, Any], list[str]]:
    """Raise CheckpointRefused unless `folder` (a push's snapshot) is an hf-norms checkpoint that loads, with a
    tokenizer or image processor unless `processor` is false (a model pushed from Python, as transformers pushes it,
    without one); returns its config.json and its remote-code files."""
    config = checkpoint_config(folder)
    if not ((folder / "model.safetensors").is_file() or (folder / "model.safetensors.index.json").is_file()):
        raise CheckpointRefused(
            f"{folder} has no safetensors weights (model.safetensors); save them with `model.save_pretrained(folder)`, "
            "which writes safetensors."
        )
    model_class = model_class_of(folder, config)
    code_files = check_remote_code(folder, config, model_class)
    check_weights_load(folder, model_class)
    check_preprocessor(folder, processor)
    return config, code_files


def model_class_of(folder: Path, config: dict[str, Any]) -> type:
    """The hf-norms class named by the config's `architectures`; one of its family's classes that no Auto class maps
    (CLIP's projection head) is refused naming the bare model to publish instead."""
    architecture = (config.get("architectures") or [""])[0]
    model_class = MODEL_CLASSES.get(architecture)
    family = family_of(config.get("model_type"))
    if model_class is None and family and architecture in {cls.__name__ for cls in family.public_classes}:
        bare = next(cls.__name__ for cls in family.heads if cls._auto_class == "AutoModel")
        raise CheckpointRefused(
            f"{folder / 'config.json'} names the architecture {architecture!r}, an hf-norms class that no Auto class "
            f"maps, so a load by id could not find it; publish the bare model: load the folder with "
            f"hf_norms.{bare}.from_pretrained and save it."
        )
    if model_class is None:
        raise CheckpointRefused(
            f"{folder / 'config.json'} names the architecture {architecture!r}, which is not an hf-norms model class; "
            "save the model again with hf_norms."
        )
    return model_class


def check_remote_code(folder: Path, config: dict[str, Any], model_class: type) -> list[str]:
    """Raise CheckpointRefused unless the config's `auto_map` holds the family's full map (the saved head under its own
    Auto class) and `folder` holds every remote-code file it and the image processor's `auto_map` reach; returns those
    files' names."""
    expected, files = family_code(config["model_type"], model_class)
    auto_map = config.get("auto_map") or {}
    wrong = sorted(name for name, target in expected.items() if auto_map.get(name) != target)
    if wrong:
        raise CheckpointRefused(
            f"{folder / 'config.json'} lacks the auto_map entries {wrong}, so `trust_remote_code=True` would not load "
            "every head; save the model again with hf_norms (`model.save_pretrained(folder)` writes the full map)."
        )
    files |= processor_code(folder)
    missing = sorted(name for name in files if not (folder / name).is_file())
    if missing:
        raise CheckpointRefused(
            f"{folder} lacks the remote-code files {missing}; save the model again with hf_norms, which writes its "
            "remote-code files next to the weights."
        )
    return sorted(files)


def check_weights_load(folder: Path, model_class: type) -> None:
    """Load the checkpoint with its own class; every weight must match a parameter and the reverse (a bare model saved
    without a pooler, like DINOv2, is loaded as its card says: with `add_pooling_layer=False`)."""
    architecture = model_class.__name__
    options = {"add_pooling_layer": False} if saved_without_pooler(folder, architecture) else {}
    try:  # the config against the weights' headers first: nothing oversized is allocated
        shapes = check_weights(folder, allow_pickle=False)[1]
        check_source_config(folder, shapes)
        check_model_fits(model_class, model_class.config_class.from_pretrained(folder), shapes, str(folder))
    except ConversionError as err:
        raise CheckpointRefused(str(err)) from None
    try:
        _, info = model_class.from_pretrained(folder, output_loading_info=True, **options)
    except Exception as err:  # any failure to load is the refusal's reason
        raise CheckpointRefused(f"{folder} does not load as {architecture}: {err}") from err
    problems = {key: sorted(map(str, info[key]))[:5] for key in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    problems = {key: names for key, names in problems.items() if names}
    if problems:
        raise CheckpointRefused(
            f"{folder} does not load cleanly as {architecture} ({problems}); the weights do not belong to this "
            "config. Save the model again with `model.save_pretrained(folder)`."
        )


def check_preprocessor(folder: Path, required: bool = True) -> None:
    """A tokenizer or an image processor must be saved next to the weights (pipelines and users need it; unless not
    `required`, which only warns), and load."""
    from transformers import AutoImageProcessor, AutoTokenizer

    if any((folder / name).is_file() for name in PROCESSOR_FILES):
        loader = AutoImageProcessor
    elif any((folder / name).is_file() for name in TOKENIZER_FILES):
        loader = AutoTokenizer
    elif not required:
        logger.warning(
            "Pushing the model without a tokenizer or image processor (none beside the weights it was loaded from): "
            "push it too (`tokenizer.push_to_hub(repo_id)`), or pipelines of this repo will not load."
        )
        return
    else:
        raise CheckpointRefused(
            f"{folder} has no tokenizer or image processor; save the source's next to the weights "
            "(`tokenizer.save_pretrained(folder)` or `image_processor.save_pretrained(folder)`)."
        )
    try:
        loader.from_pretrained(folder)
    except Exception as err:  # any failure to load is the refusal's reason
        raise CheckpointRefused(f"the {loader.__name__} saved in {folder} does not load: {err}") from err


# --------------------------------------------------------------------------------------------------------------------
# The push
# --------------------------------------------------------------------------------------------------------------------


def check_card(card_text: str) -> None:
    """Refuse, in one line, a rendered card whose metadata the Hub refuses (`card_rules.card_problems`, what its
    `/api/validate-yaml` checks before an upload), before the repo is created: a value the folder's own README.md or
    its source's card gave, which the options override."""
    errors = card_problems(card_text, "model")[0]
    if errors:
        raise CheckpointRefused(
            f"The Hub would refuse the model card: {errors[0]} The folder's README.md or its source's card gave it; "
            "give the field with its option (--license, --base-model, --language, ...), which takes precedence. "
            "Nothing was created."
        )


def resolve_endpoint(endpoint: str | None) -> str:
    """`endpoint`, else `HF_ENDPOINT` as set now, else huggingface_hub's default."""
    return (endpoint or os.environ.get("HF_ENDPOINT") or hub_constants.ENDPOINT).rstrip("/")


def check_endpoint(endpoint: str) -> None:
    """Refuse, in one line, an endpoint that is no http(s) URL of a host (a missing scheme, `ftp://`, a port past
    65535, a space in the host), before anything is read or sent: a mistake in the input, not a network failure."""
    try:
        url = urllib.parse.urlsplit(endpoint)
        usable = url.scheme in ("http", "https") and bool(url.hostname) and url.port != 0
    except ValueError:  # a port that is no number, or out of range
        usable = False
    if not usable or any(character.isspace() or not character.isprintable() for character in endpoint):
        raise CheckpointRefused(
            f"{endpoint!r:.120} is not a Hub endpoint: give an http:// or https:// URL of a host (--endpoint or "
            "HF_ENDPOINT), e.g. http://127.0.0.1:8765. Nothing was created."
        )


def left_out_lines(left_out: dict[str, str]) -> list[str]:
    """One INFO line per file a push leaves out, with why, except hf-norms' own folder marker; the files of a folder
    left out whole for one reason (a Trainer's `checkpoint-20/`) are one line naming the folder and their count."""
    by_folder: dict[str, dict[str, str]] = {}
    for name, reason in sorted(left_out.items()):
        if Path(name).name != MARKER_NAME:
            by_folder.setdefault(name.split("/")[0] if "/" in name else name, {})[name] = reason
    lines = []
    for top, files in by_folder.items():
        if len(files) > 1 and len({reason.split(" (add it with")[0] for reason in files.values()}) == 1:
            reason = next(iter(files.values())).split(" (add it with")[0]
            lines.append(f"Not uploading {top}/ ({len(files)} files): {reason} (add them with --include '{top}/')")
        else:
            lines += [f"Not uploading {name}: {reason}" for name, reason in files.items()]
    return lines


def check_hub_access(endpoint: str, token: str | None) -> None:
    """Refuse, in one line and before the checkpoint is read, a push the Hub would refuse for who is pushing: no token,
    an endpoint that does not answer, or a token it does not accept (`whoami`, as `hf auth whoami` asks)."""
    fix = "Nothing was created."
    if not token:
        raise CheckpointRefused(
            f"No Hugging Face token found: log in with `hf auth login`, set HF_TOKEN or pass --token. {fix}"
        )
    try:
        HfApi(endpoint=endpoint, token=token, library_name="hf-norms", library_version=VERSION).whoami()
    except OfflineModeIsEnabled:
        raise CheckpointRefused(
            f"HF_HUB_OFFLINE=1 is set, which forbids any request: unset it to push. {fix}"
        ) from None
    except HfHubHTTPError as err:
        if err.response is None or err.response.status_code != 401:
            return  # a failing server: the push itself reports what it answers (`explain_http_error`)
        raise CheckpointRefused(
            f"{endpoint} does not accept the token (HTTP 401): pass another with --token or HF_TOKEN, or log in with "
            f"`hf auth login`. {fix}"
        ) from None
    except httpx2.HTTPError as err:  # connection refused, reset, timed out, ...
        raise CheckpointRefused(
            f"Could not reach {endpoint}: {err}. Check the endpoint (--endpoint or HF_ENDPOINT) and the network. {fix}"
        ) from None


def pushed_line(folder: str | os.PathLike[str], repo_id: str, commit: CommitInfo) -> str:
    """The one line `hf-norms push` and `hf-norms finetune --push_to_hub` print: what was pushed, where, as what."""
    return f"Pushed {folder} to {repo_id}: commit {commit.oid} ({commit.commit_url})"


def push_to_hub(folder: str | os.PathLike[str], repo_id: str, **options: Any) -> CommitInfo | list[str]:
    """Upload the checkpoint in `folder` to `repo_id` as one commit with its model card; see the module docstring and
    `publish`. `options` are the fields of `PushArguments` (`token`, `revision`, `include`, `exclude`,
    `allow_custom_code`, `delete_patterns`, `dry_run`, the card's `base_model`, `license`, `notes`, ...); another
    keyword, or a value of the wrong type, is an `ArgumentTypeError` in one line."""
    return publish(push_arguments("push_to_hub()", folder=folder, repo_id=repo_id, **options))


def publish(arguments: PushArguments, processor: bool = True) -> CommitInfo | list[str]:
    """`hf-norms push`, and every other route that publishes (`push_to_hub`, `model.push_to_hub`, the Trainer's and
    `finetune --push_to_hub`'s push). `revision` is a branch, created from main when missing. The files uploaded are
    what a checkpoint is made of (`hf_norms.hub.upload_files`); `include` glob patterns (on the paths inside the
    folder, as `hf upload --include` applies them) add files, `exclude` patterns remove files (README.md standing for
    the card). What is published is copied into a private snapshot, with the card, checked there as a whole and
    uploaded from there (see the module docstring). `allow_custom_code` publishes `.py` files, and configs naming
    code, that are not hf-norms' own, and the card says so. `delete_patterns` (e.g. `["*.onnx"]`) deletes matching
    remote files in the same commit; nothing is deleted otherwise. `dry_run` checks and renders everything and
    returns the file list (README.md included) without contacting the endpoint.

    `processor=False` lets a folder without a tokenizer or image processor through (`model_push`: a model pushed from
    Python as transformers pushes it). Returns the commit's `CommitInfo` (`.oid`, `.commit_url`). Raises
    `CheckpointRefused` before anything is created or uploaded, or `PushError` when the endpoint fails. No log
    record, warning or error raised while it runs holds the token (`hf_norms.redaction`).
    """
    a = arguments
    token = a.token or get_token()
    with tokens_redacted(token, get_token()):
        check_endpoint(resolve_endpoint(a.endpoint))
        check_token_length(token)
        if not a.dry_run:
            check_hub_access(resolve_endpoint(a.endpoint), token)
        folder = Path(a.folder).resolve()
        with_card = not excluded(CARD_NAME, a.exclude)
        files, checkpoint_files, left_out = files_to_copy(a, folder)
        read_also = [*checkpoint_files, *(CARD_INPUTS if with_card else ())]
        with Snapshot(folder, files, read_also) as snapshot:
            config = check_snapshot(snapshot, folder, processor)
            if with_card:
                snapshot.write(CARD_NAME, render_card(a, snapshot, check_custom_code(a, snapshot, files)))
            message = a.commit_message or (
                f"Upload {a.repo_id.split('/')[-1]} ({config.get('norm_type', STOCK)}) with hf-norms {VERSION}"
            )
            texts = {"the commit message": message, "the repo id": a.repo_id, "the branch name": a.revision or ""}
            published = [*files, CARD_NAME] if with_card else files
            kept, content_left_out = screen_files(snapshot.published, published, token, texts, a.include_skipped or ())
            for line in left_out_lines({**left_out, **content_left_out}):
                logger.info(line)
            snapshot.drop(content_left_out)
            if not kept:
                raise CheckpointRefused(
                    f"The exclude patterns leave no file of {folder} to upload; nothing was uploaded."
                )
            if a.dry_run:
                return sorted(kept)
            return upload(a, folder, snapshot, kept, message, token)


def files_to_copy(a: PushArguments, folder: Path) -> tuple[list[str], list[str], dict[str, str]]:
    """(the files to publish, those the checkpoint is made of, {file left out: why}), chosen by the folder's config
    (its family's remote-code files, whether its sentence-transformers files describe it) and the include and exclude
    patterns. Only names are chosen here: whether those files make a checkpoint is checked on their copy
    (`check_snapshot`)."""
    config = checkpoint_config(folder)
    architecture = (config.get("architectures") or [""])[0]
    code = family_code(config["model_type"])[1] | processor_code(folder)
    head = None if sentence_transformers_model(folder, architecture) else architecture
    checkpoint_files = select_upload_files(folder, code, with_head=head)[0]
    include = [*(a.include or []), *(a.include_skipped or [])]
    files, left_out = select_upload_files(folder, code, include, a.exclude, with_head=head)
    return files, checkpoint_files, left_out


def check_snapshot(snapshot: Snapshot, folder: Path, processor: bool) -> dict[str, Any]:
    """`check_checkpoint` on the snapshot's copy of the folder, so the bytes loaded are the bytes uploaded (a file
    swapped in the folder meanwhile is neither); a refusal names the user's folder. Returns the copy's config.json."""
    try:
        return check_checkpoint(snapshot.source, processor)[0]
    except CheckpointRefused as err:
        raise CheckpointRefused(str(err).replace(str(snapshot.source), str(folder))) from None


def check_custom_code(a: PushArguments, snapshot: Snapshot, files: list[str]) -> list[str]:
    """The files of the snapshot that are or name code not hf-norms' own; CheckpointRefused unless `allow_custom_code`."""
    custom = custom_code(snapshot.source, files)
    if custom and not a.allow_custom_code:
        raise CheckpointRefused(
            f"{'; '.join(f'{name} {why}' for name, why in custom.items())}: `trust_remote_code=True` would run it. "
            "Save the model again with hf_norms (which copies its own code), leave the file out (--exclude), or "
            "publish it with --allow-custom-code (the card then says so). Nothing was uploaded."
        )
    return sorted(custom)


def render_card(a: PushArguments, snapshot: Snapshot, custom: list[str]) -> bytes:
    """The card of the snapshot's copy of the folder, the options taking precedence; refused if the Hub would."""
    card = str(
        render_model_card(
            gather_card_facts(snapshot.source, a.repo_id, stating_unread(a.card(), a.include_skipped), custom)
        )
    )
    check_card(card)
    return card.encode("utf-8")


def upload(
    a: PushArguments, folder: Path, snapshot: Snapshot, files: list[str], message: str, token: str | None
) -> CommitInfo:
    """Create the repo (and branch) if missing and upload the snapshot's published files (`files`), their bytes and
    nothing else, in one commit (huggingface_hub retries a failed one), deleting the remote files `delete_patterns`
    match."""
    repo_id, revision, endpoint = a.repo_id, a.revision, resolve_endpoint(a.endpoint)
    api = HfApi(endpoint=endpoint, token=token, library_name="hf-norms", library_version=VERSION)
    logger.info("Uploading %d files from %s to %s/%s", len(files), folder, endpoint, repo_id)
    try:
        repo_id = create_repo(api, repo_id, a.private)
        if revision and revision != hub_constants.DEFAULT_REVISION:
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        return api.upload_folder(  # the snapshot holds exactly `files`
            repo_id=repo_id,
            folder_path=snapshot.published,
            commit_message=message,
            revision=revision,
            delete_patterns=list(a.delete_patterns) if a.delete_patterns else None,
        )
    except OfflineModeIsEnabled:
        raise PushError("HF_HUB_OFFLINE=1 is set, which forbids any request: unset it to push.") from None
    except HfHubHTTPError as err:
        raise PushError(explain_http_error(err, endpoint, repo_id, folder)) from None
    except httpx2.HTTPError as err:  # connection refused, reset, timed out, ...
        raise PushError(
            f"Could not reach {endpoint} to push {folder} to {repo_id}: {err}. Check the endpoint (--endpoint "
            "or HF_ENDPOINT) and the network; nothing in the folder was changed, so run the same push again."
        ) from None


def create_repo(api: HfApi, repo_id: str, private: bool) -> str:
    """Create the repo unless it exists; returns its full id (`name` -> `user/name`). Where the token may not create
    repos but the repo exists (401/403 on create), huggingface_hub fails to parse its own URL on an endpoint other
    than huggingface.co (a ValueError): the repo is there, and the upload says whether the token may write to it."""
    try:
        return api.create_repo(repo_id, private=private, exist_ok=True).repo_id
    except ValueError:  # "Invalid HF URI" (other errors of the request are HfHubHTTPError, an OSError)
        return repo_id


def explain_http_error(err: HfHubHTTPError, endpoint: str, repo_id: str, folder: Path) -> str:
    """A message naming the HTTP status, what it means for this push and what to do, without the token."""
    status = err.response.status_code if err.response is not None else None
    if status in (401, 403):
        advice = "the token was refused: use one with write access to this namespace (HF_TOKEN or `hf auth login`)"
    elif status == 412:
        advice = "the branch moved during the push: run it again"
    elif status is not None and status >= 500:
        advice = "the server failed, so the commit was not made: run the same push again"
    else:
        advice = "see the server's message"
    detail = " ".join((err.server_message or str(err).splitlines()[0]).split())  # one line
    return (
        f"Pushing {folder} to {repo_id} at {endpoint} failed with HTTP {status}: {advice}. The local folder is "
        f"untouched. Server said: {detail}"
    )
