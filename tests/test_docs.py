"""README.md and docs/*.md stay true to the code: every command they show parses with the real parser of what it runs,
every relative link leads to a file (and heading) that exists, and every repository path and test they name exists.

Commands are read from the shell code blocks (```bash, ```sh, ```console or a bare ```): `\\` line continuations
joined, a `$ ` prompt, comments, a trailing `&` and `NAME=value` prefixes dropped; and from inline code that starts
with `python -m`, `torchrun` or `accelerate launch` (benchmark commands sit in the prose beside their tables). Parsers:
`hf_norms.cli.build_parser` for `hf-norms`, transformers' `HfArgumentParser` of `hf_norms.training.finetune` for
`hf-norms finetune` and `-m hf_norms.training.finetune`, `hf-norms heal`'s for `-m hf_norms.conversion.heal`,
`build_parser()` of each `benchmarks` module.
"""

from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path
from typing import NamedTuple

import pytest

from hf_norms.cli import parse

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
SHELL_LANGUAGES = {"", "bash", "sh", "shell", "console"}
INLINE_CODE = re.compile(r"(?<!`)`([^`]+)`(?!`)")
INLINE_COMMAND = re.compile(r"^(python -m |torchrun |accelerate launch )")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
ELISION = "..."  # `torchrun ... -m hf_norms.training.finetune ...`: a command shown in part, not one to parse
FINETUNE_MODULE = "hf_norms.training.finetune"
HEAL_MODULE = "hf_norms.conversion.heal"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
REPO_PATH = re.compile(r"^(hf_norms|tests|benchmarks|conversions|scripts|docs)/[\w./-]*$")
TEST_NAME = re.compile(r"^(?:(?:[\w/]+/)?(test_\w+\.py)::)?(test_\w+)$")


class Command(NamedTuple):
    """A command shown in a page: where (`docs/x.md:12`), what runs (`hf-norms` or a module) and its arguments."""

    where: str
    program: str
    arguments: list[str]


def relative(page: Path) -> str:
    return page.relative_to(ROOT).as_posix() if page.is_relative_to(ROOT) else str(page)


def without_fences(text: str) -> str:
    """The page with its code blocks blanked (line numbers kept), so that only prose is left."""
    return FENCE.sub(lambda match: "\n" * match.group(0).count("\n"), text)


def shell_lines(text: str) -> list[tuple[int, str]]:
    """(line number, logical line) of every shell code block: continuations joined, a `$ ` prompt dropped."""
    lines = []
    for match in FENCE.finditer(text):
        if match.group(1) not in SHELL_LANGUAGES:
            continue
        first = text.count("\n", 0, match.start(2)) + 1
        physical = match.group(2).split("\n")
        start = 0
        while start < len(physical):
            end = start
            while physical[end].endswith("\\") and end + 1 < len(physical):
                end += 1
            joined = " ".join(line.removesuffix("\\").strip() for line in physical[start : end + 1])
            if joined:
                lines.append((first + start, joined.removeprefix("$ ")))
            start = end + 1
    return lines


def command_of(where: str, line: str) -> Command | None:
    """The command a shell line runs, without its `NAME=value` prefixes, comment and trailing `&`; None for a line
    that runs nothing documented (`export`, `make`, `python -c`, an assignment)."""
    words = shlex.split(line, comments=True)
    while words and ASSIGNMENT.match(words[0]):
        words.pop(0)
    if words[-1:] == ["&"]:
        words.pop()
    if words[:1] == ["hf-norms"]:
        return Command(where, "hf-norms", words[1:])
    if words[:2] == ["python", "-m"] or words[:1] == ["torchrun"] or words[:2] == ["accelerate", "launch"]:
        module = words.index("-m") + 1 if "-m" in words else None
        return None if module is None else Command(where, words[module], words[module + 1 :])
    return None


def page_commands(page: Path) -> list[Command]:
    text = page.read_text()
    commands = [command_of(f"{relative(page)}:{number}", line) for number, line in shell_lines(text)]
    prose = without_fences(text)
    for match in INLINE_CODE.finditer(prose):
        code = " ".join(match.group(1).split())
        if INLINE_COMMAND.match(code):
            commands.append(command_of(f"{relative(page)}:{prose.count(chr(10), 0, match.start()) + 1}", code))
    return [command for command in commands if command is not None and ELISION not in command.arguments]


COMMANDS = [command for page in PAGES for command in page_commands(page)]


def finetune_failure(arguments: list[str]) -> str | None:
    """What `hf-norms finetune ARGUMENTS` (and `-m hf_norms.training.finetune`) says is wrong with them, as its `main`
    parses them: transformers' parser of the argument dataclasses, their checks, and no argument left over."""
    from hf_norms.training.finetune import build_argument_parser

    parser = build_argument_parser(prog="hf-norms finetune")
    *_, unknown = parser.parse_args_into_dataclasses(arguments, return_remaining_strings=True)
    return f"unrecognized arguments {unknown}" if unknown else None


def parse_failure(command: Command) -> str | None:
    """None when the real parser of `command.program` accepts its arguments, else what went wrong."""
    try:
        if command.program == "hf-norms" and command.arguments[:1] == ["finetune"]:
            return finetune_failure(command.arguments[1:])
        if command.program == "hf-norms":
            parse(command.arguments)
        elif command.program == FINETUNE_MODULE:
            return finetune_failure(command.arguments)
        elif command.program == HEAL_MODULE:  # `hf-norms heal` as a module, for launchers
            parse(["heal", *command.arguments])
        elif command.program.startswith("benchmarks."):
            importlib.import_module(command.program).build_parser().parse_args(command.arguments)
        else:
            return f"no parser known for {command.program}: add it to tests/test_docs.py"
    except SystemExit as exit_:
        return f"the parser exited with status {exit_.code}"
    except ValueError as error:  # the argument dataclasses' own checks (FinetuneInputError is one)
        return str(error)
    return None


@pytest.mark.parametrize("command", COMMANDS, ids=[command.where for command in COMMANDS])
def test_every_documented_command_parses(command: Command) -> None:
    failure = parse_failure(command)
    assert failure is None, f"{command.where}: `{shlex.join([command.program, *command.arguments])}`: {failure}"


def test_commands_are_found_in_every_form_the_pages_use() -> None:
    """The extraction reads what the pages hold: each hf-norms command and every benchmark is seen."""
    subcommands = {command.arguments[0] for command in COMMANDS if command.program == "hf-norms"}
    assert subcommands == {"convert", "heal", "finetune", "push", "hub"}
    benchmarks = {command.program for command in COMMANDS if command.program.startswith("benchmarks.")}
    every_benchmark = {f"benchmarks.{path.stem}" for path in (ROOT / "benchmarks").glob("*.py")}
    assert benchmarks == every_benchmark - {"benchmarks.__init__", "benchmarks.timing"}  # each one is documented
    text = "```console\n$ HF_TOKEN=abc A=1 hf-norms push org/x \\\n   my folder/ --include '*.json'  # a comment\n```\n"
    [(number, line)] = shell_lines(text)
    assert command_of(f"x:{number}", line) == Command("x:2", "hf-norms", ["push", "org/x", "my", "folder/",
                                                                            "--include", "*.json"])  # fmt: skip
    assert command_of("x", "hf-norms hub --root r --port 8765 &  # serves") == Command(
        "x", "hf-norms", ["hub", "--root", "r", "--port", "8765"]
    )
    assert command_of("x", "torchrun --nproc_per_node 2 -m hf_norms.training.finetune --use_cpu").arguments == [
        "--use_cpu"
    ]
    assert command_of("x", 'export HF_ENDPOINT=http://127.0.0.1:1 MINILM="$(python -c "x")"') is None


@pytest.mark.parametrize(
    "line, failure",
    [
        ("hf-norms convert src --norm-type nope --output out", "status 2"),
        ("hf-norms convert src --output out [--fold]", "status 2"),
        ("hf-norms finetune --model_name_or_path m --no_such_option 1", "unrecognized arguments ['--no_such_option'"),
        ("hf-norms finetune --model_name_or_path m --model_type vit_norm", "exactly one of model_name_or_path"),
        ("python -m benchmarks.whole_models --executions fast", "status 2"),
        ("python -m hf_norms.unknown --x", "no parser known for hf_norms.unknown"),
    ],
)
def test_a_command_that_does_not_parse_is_reported(line: str, failure: str) -> None:
    message = parse_failure(command_of("x", line))
    assert message is not None and failure in message, message


def heading_anchors(page: Path) -> set[str]:
    """GitHub's anchors for the headings of a page: lower case, punctuation dropped, spaces as `-`, repeats `-N`."""
    anchors: set[str] = set()
    for heading in re.findall(r"^#+ (.+)$", without_fences(page.read_text()), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchor, repeat = slug, 0
        while anchor in anchors:
            repeat += 1
            anchor = f"{slug}-{repeat}"
        anchors.add(anchor)
    return anchors


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(without_fences(page.read_text())):
        if re.match(r"^[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and anchor not in heading_anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {relative(linked)}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=relative)
def test_every_relative_link_leads_to_a_file_and_heading(page: Path) -> None:
    assert broken_links(page) == []


def test_the_readme_links_every_docs_page() -> None:
    linked = {(ROOT / target).resolve() for target in LINK.findall((ROOT / "README.md").read_text())}
    assert {page.resolve() for page in PAGES[1:]} <= linked


def test_a_broken_link_is_reported(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text(
        "# A title\n\n[ok](b.md#the-part) [file](nowhere.md) [part](b.md#other) [s](#a-title)\n"
    )
    (tmp_path / "b.md").write_text("# B\n\n## The part\n")
    assert broken_links(tmp_path / "a.md") == [
        "nowhere.md: no such file", f"b.md#other: no heading #other in {tmp_path / 'b.md'}"
    ]  # fmt: skip


@pytest.mark.parametrize("page", PAGES, ids=relative)
def test_every_path_and_test_a_page_names_exists(page: Path) -> None:
    """`hf_norms/...`, `tests/...` and other repository paths in inline code exist; `test_x` and `file.py::test_x`
    name a test function of the suite (in that file, where one is given)."""
    test_sources = {path.name: path.read_text() for path in (ROOT / "tests").rglob("test_*.py")}
    missing = []
    for code in INLINE_CODE.findall(without_fences(page.read_text())):
        if REPO_PATH.match(code) and not (ROOT / code).exists():
            missing.append(code)
        named = TEST_NAME.match(code)
        if named and not code.endswith(".py"):
            file, function = named.groups()
            sources = [test_sources.get(file, "")] if file else test_sources.values()
            if not any(re.search(rf"^def {function}\b", source, re.MULTILINE) for source in sources):
                missing.append(code)
    assert missing == []
