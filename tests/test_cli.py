"""The `hf-norms` command line: its conventions (both spellings, `--version`, `--token`, descriptions), help and argument
errors that answer before a subcommand's own code is imported, and `import hf_norms` registering with transformers."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HF_NORMS_SCRIPT

import hf_norms
from hf_norms import cli

COMMANDS = ("demo", "convert", "heal", "finetune", "push", "hub", "env")
HUB_COMMANDS = ("convert", "heal", "push")  # and finetune (`ModelArguments.token`)


def subcommand_parsers() -> dict[str, argparse.ArgumentParser]:
    """Each command's parser (finetune's: the one that renders its help; transformers parses a real run)."""
    return {**{name: command.parser(name) for name, command in cli.COMMANDS.items()},
            "finetune": cli.finetune_help_parser()}  # fmt: skip


def test_the_command_line_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["--help"])
    assert exited.value.code == 0
    listing = capsys.readouterr().out
    for command in COMMANDS:
        assert command in listing


def test_every_subcommand_has_a_description():
    parsers = subcommand_parsers()
    assert set(parsers) == set(COMMANDS)
    for name, parser in parsers.items():
        assert parser.description and len(parser.description) > 60, name


def test_version(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out == f"hf-norms {hf_norms.__version__}\n"


def test_env_prints_what_a_bug_report_needs_and_no_credentials(capsys, monkeypatch):
    from importlib import metadata

    monkeypatch.setenv("HF_ENDPOINT", "http://someone:s3cret-password@127.0.0.1:9/")
    assert cli.main(["env"]) == 0
    lines = dict(line[2:].split(": ", 1) for line in capsys.readouterr().out.splitlines() if line.startswith("- "))
    assert lines["hf-norms"] == hf_norms.__version__ and lines["Python"] == sys.version.split()[0]
    for package in ("torch", "transformers", "huggingface_hub", "safetensors", "accelerate", "datasets", "peft"):
        assert lines[package] == metadata.version(package), package
    assert lines["tested transformers"].startswith("5.20.0 to 5.25.0")
    assert lines["HF_ENDPOINT"] == "http://***@127.0.0.1:9/"  # the user and password masked
    assert lines["accelerator"].startswith(("none", "cuda", "mps"))


def test_every_multi_word_option_has_both_spellings():
    parsers = {**subcommand_parsers(), "finetune": cli.finetune_help_parser()}
    for name, parser in parsers.items():
        for action in parser._actions:
            for option in action.option_strings:
                words = option.removeprefix("--")
                if option.startswith("--") and ("-" in words or "_" in words):
                    other = "--" + (words.replace("-", "_") if "-" in words else words.replace("_", "-"))
                    assert other in action.option_strings, f"{name} {option}"
    convert = ["convert", "x", "--output", "o", "--calibration_data", "d", "--calibration-samples", "3"]
    _, args = cli.parse([*convert, "--norm_type", "dtn"])
    assert (args.norm_type, args.calibration_data, args.calibration_samples) == ("dtn", "d", 3)


def test_options_are_spelled_in_full(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.parse(["convert", "x", "--norm-type", "dtn", "--output", "o", "--calibration", "d"])
    error = capsys.readouterr().err
    assert exited.value.code == 2 and "unrecognized option --calibration; did you mean --calibration-data?" in error


TYPOS = [
    (["--versoin"], "hf-norms: error: unrecognized option --versoin; did you mean --version?"),
    (["convrt", "x"], "hf-norms: error: unknown command 'convrt'; did you mean convert?"),
    (
        ["convert", "x", "--norm-typ", "dyt", "--output", "o"],
        "unrecognized option --norm-typ; did you mean --norm-type?",
    ),
    (["convert", "x", "--norm_typ=dyt", "--output", "o"], "unrecognized option --norm_typ; did you mean --norm_type?"),
    (["push", "a/b", ".", "--dryrun"], "hf-norms push: error: unrecognized option --dryrun; did you mean --dry-run?"),
    (["hub", "--prot", "8000"], "hf-norms hub: error: unrecognized option --prot; did you mean --port?"),
    (
        ["finetune", "--norm_typ", "dyt"],
        "hf-norms finetune: error: unrecognized option --norm_typ; did you mean --norm_type?",
    ),
    (["finetune", "--learnig-rate", "1e-3"], "unrecognized option --learnig-rate; did you mean --learning-rate?"),
    (
        ["heal", "x", "--work-dri", "w"],
        "hf-norms heal: error: unrecognized option --work-dri; did you mean --work-dir?",
    ),
]


@pytest.mark.parametrize(("argv", "message"), TYPOS, ids=" ".join)
def test_a_typo_is_named_with_the_nearest_option_or_command(argv, message, capsys):
    """Before, `--versoin` said a command was required, `--norm-typ` that `--norm_type` was required, and `--dryrun`
    and `convrt` suggested nothing."""
    try:
        status = cli.main(argv)
    except SystemExit as exited:
        status = exited.code
    error = capsys.readouterr().err
    assert status == 2 and message in error and error.count("\n") == 1, error


def test_help_lists_each_spelling_once_and_a_negation_says_what_it_negates():
    for name, parser in subcommand_parsers().items():
        for action in parser._actions:
            assert len(action.option_strings) == len(set(action.option_strings)), (name, action.option_strings)
            if action.option_strings[:1] and action.option_strings[0].startswith(("--no-", "--no_")) and action.help:
                negated = action.option_strings[0][5:].replace("_", "-")
                assert action.help == f"the opposite of --{negated}", (name, action.help)


def test_a_token_option_wherever_a_hub_is_reached():
    from hf_norms.training.arguments import ModelArguments

    parsers = subcommand_parsers()
    for name in HUB_COMMANDS:
        assert any("--token" in action.option_strings for action in parsers[name]._actions), name
    token = next(field for field in dataclasses.fields(ModelArguments) if field.name == "token")
    assert token.default is None and not token.repr  # never shown where the arguments are printed


def test_the_trainer_options_finetune_help_shows_are_trainer_options():
    from transformers import TrainingArguments

    assert set(cli.FINETUNE_TRAINER_OPTIONS) <= {field.name for field in dataclasses.fields(TrainingArguments)}


def test_finetune_help_lists_hf_norms_options_first_and_help_all_lists_every_option(capsys):
    with pytest.raises(SystemExit):
        cli.main(["finetune", "--help"])
    short = capsys.readouterr().out
    positions = [short.index(text) for text in ("--model_name_or_path", "--dataset", "--output_dir", "--help-all")]
    assert positions == sorted(positions) and short.count("\n") < 150
    assert "--weight_decay" not in short
    with pytest.raises(SystemExit):
        cli.main(["finetune", "--help-all"])
    assert "--weight_decay" in capsys.readouterr().out


REGISTERED = """
import json, sys
import hf_norms
import transformers
from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as LORA
from transformers.models.auto.modeling_auto import MODEL_MAPPING
stock = MODEL_MAPPING[transformers.BertConfig]
print(json.dumps([
    "vit_norm" in transformers.models.auto.configuration_auto.CONFIG_MAPPING,
    MODEL_MAPPING[hf_norms.BertNormConfig].__name__,
    issubclass(stock, transformers.BertModel), stock.__name__,
    LORA.get("bert_norm"),
]))
"""


def test_importing_hf_norms_registers_classes_with_transformers_and_peft():
    """`import hf_norms` registers real classes (no stand-ins): its own heads, and for each stock config a subclass of
    the stock head that takes norm options; with peft installed, the families' default LoRA targets."""
    result = subprocess.run([sys.executable, "-c", REGISTERED], capture_output=True, text=True, check=True)
    assert json.loads(result.stdout) == [True, "BertNormModel", True, "BertModel", ["query", "value"]]


def test_a_failed_registration_is_one_line_at_import():
    """If transformers refuses the registration, `import hf_norms` fails there, in one line saying why, not later in a
    TypeError about `norm_type`."""
    code = "import transformers\ntransformers.AutoConfig.register = None\nimport hf_norms"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 1 and last.startswith("ImportError: hf-norms could not register its models with "
                                                      "transformers 5."), result.stderr  # fmt: skip
    assert last.endswith("TypeError: 'NoneType' object is not callable")


# What a subcommand runs (its data, conversion, training and publishing code), imported only when it runs.
SUBCOMMAND_CODE = ("datasets", "hf_norms.conversion.convert", "hf_norms.training.finetune", "hf_norms.hub.publish")


HELP_COMMANDS = [["--help"], ["--version"], *([command, "--help"] for command in COMMANDS)]

BUILD_EVERY_HELP = f"""
import contextlib, io, json, sys
sys.argv[0] = {str(HF_NORMS_SCRIPT)!r}  # as the console script runs it
from hf_norms import cli
for argv in {HELP_COMMANDS!r}:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        cli.main(argv)
print(json.dumps(sorted(name for name in {SUBCOMMAND_CODE!r} if name in sys.modules)))
"""


def test_help_imports_no_subcommand_code():
    """After building every help in one fresh process, no subcommand's own code is loaded."""
    result = subprocess.run([sys.executable, "-c", BUILD_EVERY_HELP], capture_output=True, text=True, check=True)
    assert json.loads(result.stdout) == []


# Argument errors: the token in none of them, whatever the subcommand and wherever the token came from ----------------

HUB_SHAPED = "hf_ArgumentErrorsAbCdEfGhIjKlMnOp0123"  # known to no one: redacted by its shape
ENV_TOKEN, STORED_TOKEN, ARGV_TOKEN = "env-token-4711-abcdefgh", "stored-login-0815-abcdef", "argv-token-2718-abcdef"
ARGUMENT_ERRORS = [  # T is the token; each makes the parser (or finetune's checks) print it back
    ["push", "org/x", ".", "extra", "T"],
    ["convert", "src", "--norm-type", "dyt", "--output", "o", "--batch-size", "T"],
    ["convert", "src", "--norm-type", "T", "--output", "o"],
    ["heal", "folder", "--data", "d", "--max-steps", "T"],
    ["heal", "folder", "--data", "d", "--max-steps=T"],
    ["hub", "--root", "r", "--port", "T"],
    ["hub", "--root", "r", "T"],
    ["demo", "--workdir", "w", "T"],
    ["finetune", "--max_steps", "T"],
    ["finetune", "--learning_rate", "T", "--output_dir", "o"],
]
TOKEN_OPTION_ERRORS = [  # the token follows a token option: known from argv, whatever its shape
    ["push", "org/x", ".", "--hub-token", "T"],
    ["convert", "src", "--norm-type", "dyt", "--output", "o", "--hub_token", "T"],
    ["heal", "folder", "--data", "d", "--hub_token=T"],
    ["hub", "--root", "r", "--hub_token", "T"],
    ["demo", "--token", "T"],
    ["demo", "--token=T"],
    ["finetune", "--token", "T", "--max_steps", "T"],
]


def assert_no_token_printed(argv: list[str], token: str, capsys: pytest.CaptureFixture, shown: bool = True) -> None:
    """`hf-norms ARGV` (T standing for `token`) exits 2 with one error line on stderr, which shows `<token>` where the
    token was (`shown`: the error names the value, not only an unknown option); no form of the token is printed."""
    from hf_norms.redaction import text_token_forms

    try:
        status = cli.main([part.replace("T", token) if part in ("T", "--max-steps=T", "--hub_token=T", "--token=T")
                           else part for part in argv])  # fmt: skip
    except SystemExit as exit:
        status = exit.code
    out, err = capsys.readouterr()
    assert status == 2 and err.count("\n") == 1 and "error: " in err, (argv, err)
    assert not [form for form in text_token_forms(token) if form in out + err], (argv, err)
    assert ("<token>" in err) == shown, (argv, err)  # the token was printed, redacted


@pytest.mark.parametrize("source", ["hub-shaped", "HF_TOKEN", "stored login"])
@pytest.mark.parametrize("argv", ARGUMENT_ERRORS, ids=" ".join)
def test_argument_errors_never_print_the_token(argv, source, capsys, monkeypatch, tmp_path):
    from huggingface_hub import constants

    token = {"hub-shaped": HUB_SHAPED, "HF_TOKEN": ENV_TOKEN, "stored login": STORED_TOKEN}[source]
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "token"))
    if source == "HF_TOKEN":
        monkeypatch.setenv("HF_TOKEN", token)
    elif source == "stored login":
        (tmp_path / "token").write_text(token)
    monkeypatch.chdir(tmp_path)
    assert_no_token_printed(argv, token, capsys)


@pytest.mark.parametrize("argv", TOKEN_OPTION_ERRORS, ids=" ".join)
def test_a_token_given_as_an_option_is_never_printed(argv, capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.chdir(tmp_path)
    # an unknown option (`--hub-token`) is named without the value that follows it
    assert_no_token_printed(argv, ARGV_TOKEN, capsys, shown=argv[0] == "finetune")


ARGUMENT_ERRORS_WITHOUT_IMPORTS = f"""
import contextlib, io, json, sys
sys.argv[0] = {str(HF_NORMS_SCRIPT)!r}
from hf_norms import cli
for argv in {[argv for argv in ARGUMENT_ERRORS + TOKEN_OPTION_ERRORS if argv[0] != "finetune"]!r}:
    with contextlib.redirect_stderr(io.StringIO()), contextlib.suppress(SystemExit):
        cli.main(argv)
print(json.dumps(sorted(name for name in {SUBCOMMAND_CODE!r} if name in sys.modules)))
"""


def test_argument_errors_import_no_subcommand_code():
    """Argument errors answer before a subcommand's own code is imported, as help does; the redaction every command
    runs in adds no import of it either."""
    result = subprocess.run([sys.executable, "-c", ARGUMENT_ERRORS_WITHOUT_IMPORTS], capture_output=True, text=True,
                            check=True)  # fmt: skip
    assert json.loads(result.stdout) == []


def option_fields(arguments: type) -> dict[str, dataclasses.Field]:
    return {field.name: field for field in dataclasses.fields(arguments) if field.metadata.get("cli", True)}


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_option_of_a_command_is_one_field_of_its_dataclass(name):
    """What the command line takes is the dataclass the Python API takes: each option (every spelling of it) is a field,
    and each field an option."""
    command = cli.COMMANDS[name]
    actions = [action for action in command.parser(name)._actions if action.dest != "help"]
    assert {action.dest for action in actions} == set(option_fields(command.arguments))
    for action in actions:
        spellings = {f"--{action.dest}", f"--{action.dest.replace('_', '-')}"}
        aliases = option_fields(command.arguments)[action.dest].metadata.get("aliases", [])
        allowed = spellings | {
            a for alias in aliases for a in (alias, alias.replace("-", "_"), alias.replace("_", "-"))
        }
        negation = option_fields(command.arguments)[action.dest].metadata.get("negation")
        allowed |= {negation, negation.replace("-", "_").replace("__", "--")} if negation else set()
        allowed |= {f"--no_{action.dest}", f"--no-{action.dest.replace('_', '-')}"}  # HfArgumentParser's, for True
        assert set(action.option_strings) <= allowed, (name, action.option_strings)


DECLARED_ONCE = [cli.ConvertArguments, cli.HealArguments, cli.PushArguments, cli.HubArguments, cli.DemoArguments]


# the modules that run convert, heal, push, hub and demo: the Python API and what it calls with the options
API_MODULES = ["cli.py", "demo.py", "conversion/convert.py", "conversion/healing.py", "conversion/heal.py",
               "conversion/distillation.py", "conversion/calibration.py", "hub/publish.py", "hub/model_card.py",
               "hub/card_facts.py", "hub/server/http.py"]  # fmt: skip


def test_every_option_is_declared_in_one_place_only():
    """No parser is built by hand (`add_argument` only in `cli_parsing` and the finetune help listing), and no function
    that runs a command takes one of its options as a parameter with a default of its own: the default is the
    dataclass field's, written once."""
    names = {field for arguments in DECLARED_ONCE for field in option_fields(arguments)} | {"progress"}
    package = Path(hf_norms.__file__).parent
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text())
        calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
                 and getattr(node.func, "attr", None) == "add_argument"]  # fmt: skip
        if path.name not in ("cli_parsing.py", "cli.py"):
            assert not calls, f"{path}: add_argument"
        if path.relative_to(package).as_posix() not in API_MODULES:
            continue
        for function in (node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))):
            arguments = (
                function.args
            )  # keyword options: a positional argument (`convert_model(model, "dyt", texts)`) is
            with_defaults = [  # the API's own, not an option
                argument for argument, default in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True)
                if default is not None
            ]  # fmt: skip
            repeated = [argument.arg for argument in with_defaults if argument.arg in names]
            assert not repeated, f"{path}:{function.lineno} {function.name}({', '.join(repeated)}=...)"


# signatures a framework dictates: a model's and an autograd Function's `forward`/`backward`, DTN's custom operator and
# the ONNX translation registered for it (both one flat argument per tensor of the operator's schema)
FRAMEWORK_SIGNATURES = {"forward", "backward", "token_norm_operator", "onnx_token_norm"}


def test_no_public_function_takes_more_than_8_parameters():
    package = Path(hf_norms.__file__).parent
    for path in package.rglob("*.py"):
        for function in ast.walk(ast.parse(path.read_text())):
            if (isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) and not function.name.startswith("_")
                    and function.name not in FRAMEWORK_SIGNATURES):  # fmt: skip
                arguments = function.args
                count = len(arguments.posonlyargs + arguments.args + arguments.kwonlyargs)
                count += bool(arguments.vararg) + bool(arguments.kwarg) - (arguments.args[:1] != [] and
                                                                         arguments.args[0].arg in ("self", "cls"))  # fmt: skip
                assert count <= 8, f"{path}:{function.lineno} {function.name} takes {count} parameters"


PATH_TYPOS = [
    ["convert", "./no-such-folder", "--norm_type", "dtn", "--output", "out"],
    ["convert", "models/vit/dtn", "--norm-type", "dtn", "--output", "out"],
    ["finetune", "--model_name_or_path", "./no-such-folder", "--norm_type", "dtn", "--output_dir", "out"],
    ["finetune", "--output_dir", "out", "--model-name-or-path=~/no-such-folder"],
]
PATH_TYPOS_WITHOUT_IMPORTS = f"""
import contextlib, io, json, sys
sys.argv[0] = {str(HF_NORMS_SCRIPT)!r}
from hf_norms import cli
answers = []
for argv in {PATH_TYPOS!r}:
    with contextlib.redirect_stderr(io.StringIO()) as stderr:
        status = cli.main(argv)
    answers.append([status, stderr.getvalue()])
print(json.dumps([answers, sorted(name for name in {SUBCOMMAND_CODE!r} if name in sys.modules)]))
"""


def test_a_mistyped_source_folder_is_one_line_before_the_subcommand_code_is_imported(tmp_path):
    """`hf-norms convert ./typo ...` and `hf-norms finetune --model_name_or_path ./typo ...` answer as an option typo
    does: one line, status 2, before the conversion or training code is imported (they took 11 and 14 s)."""
    result = subprocess.run([sys.executable, "-c", PATH_TYPOS_WITHOUT_IMPORTS], capture_output=True, text=True,
                            cwd=tmp_path, check=True)  # fmt: skip
    answers, imported = json.loads(result.stdout)
    home = Path("~").expanduser()
    assert answers == [
        [2, f"hf-norms convert: error: There is no folder '{tmp_path / 'no-such-folder'}'; give an existing "
            "checkpoint folder, or a Hub id 'org/name'.\n"],
        [2, f"hf-norms convert: error: There is no folder '{tmp_path / 'models/vit/dtn'}'; give an existing "
            "checkpoint folder, or a Hub id 'org/name'.\n"],
        [2, f"hf-norms finetune: error: There is no checkpoint folder '{tmp_path / 'no-such-folder'}'; check "
            "--model_name_or_path.\n"],
        [2, f"hf-norms finetune: error: There is no checkpoint folder '{home / 'no-such-folder'}'; check "
            "--model_name_or_path.\n"],
    ]  # fmt: skip
    assert imported == []
