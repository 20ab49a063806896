"""`hf-norms finetune ARGS.json` / `ARGS.yaml`: an options file gets exactly the command line's checks (each value read
as transformers' `HfArgumentParser` reads the option's text, a value of the wrong type refused in one line naming the
option and the file), before anything is created; a file that is not a regular file is refused without being opened.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hf_norms import cli
from hf_norms.training.finetune import build_argument_parser, parsed_arguments

pytestmark = pytest.mark.usefixtures("one_thread")

# a mapping of 10**12 leaves in YAML, from 120 of them: its aliases repeat each list ten times
ALIAS_BOMB = "lr_scheduler_kwargs:\n  k0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"  k{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 12)
)

# option -> (its value in the file, what the one line says after "OPTION in FILE ")
WRONG_TYPES = {
    "num_train_epochs": ("abc", "must be a number, got 'abc'."),
    "report_to": ([["a"]], "must be a text, or a list of them, got [['a']]."),
    "lr_scheduler_kwargs": ({f"k{i}": i for i in range(10_001)}, "holds more than 10000 values; give a short one."),
    "seed": ("x", "must be an integer, got 'x'."),
    "output_dir": (123, "must be a text, got 123."),
    "use_cpu": ("maybe", "must be true or false, got 'maybe'."),
    "norm_type": (5, "must be a text, got 5."),
    "eval_strategy": ("sometimes", "must be one of no, steps, epoch, got 'sometimes'."),
    "max_steps": (2.5, "must be an integer, got 2.5."),
    "label_names": ({"a": 1}, "must be a text, or a list of them, got {'a': 1}."),
    "per_device_train_batch_size": (True, "must be an integer, got True."),
    "optim_args": (["a", "b"], "must be a text, got ['a', 'b']."),
    "nmu_train_epochs": (3, "is not an option of hf-norms finetune; see `hf-norms finetune --help`."),
}
# values every type reads but no run can use: the command line's own checks, in a file too
WRONG_VALUES = {
    "seed": (2**40, "seed must be an integer in [0, 4294967295], got 1099511627776."),
    "num_train_epochs": ("nan", "num_train_epochs must be a finite number > 0, got nan."),
    "max_steps": ("0", "max_steps must be >= 1, or -1 to train num_train_epochs epochs, got 0."),
}


@pytest.fixture
def options_file(tiny_bert_dir, tmp_path):
    """Factory: a .json or .yaml options file of a tiny fine-tuning run with `extra` options."""
    data = tmp_path / "news.csv"
    data.write_text("text,label\n" + "".join(f"story number {i},{i % 2}\n" for i in range(8)))

    def write(extra: dict, suffix: str = ".json") -> Path:
        options = {"model_name_or_path": str(tiny_bert_dir), "dataset": str(data), "use_cpu": True,
                   "output_dir": str(tmp_path / "out"), "max_seq_length": 16, "max_steps": 1, **extra}  # fmt: skip
        path = tmp_path / f"options{suffix}"
        path.write_text(json.dumps(options) if suffix == ".json" else yaml.safe_dump(options, sort_keys=False))
        return path

    return write


def refused(argv: list[str], capsys) -> str:
    """The one line `hf-norms ARGV` is refused with (exit status 2)."""
    status = cli.main(argv)
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    return err.removeprefix("hf-norms finetune: error: ").rstrip("\n")


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
@pytest.mark.parametrize("option", sorted(WRONG_TYPES))
def test_a_value_of_the_wrong_type_in_an_options_file_is_one_line_before_anything_is_created(
    option, suffix, options_file, tmp_path, capsys
):
    """They used to end in a raw TypeError (`num_train_epochs: abc`, `report_to: [[a]]`, an alias bomb as
    `lr_scheduler_kwargs`, `seed: x`, `output_dir: 123`), some after the output folder was created."""
    value, said = WRONG_TYPES[option]
    path = options_file({option: value}, suffix)
    if suffix == ".yaml" and option == "lr_scheduler_kwargs":
        path.write_text(path.read_text().split("lr_scheduler_kwargs:")[0] + ALIAS_BOMB)
    assert refused(["finetune", str(path)], capsys) == f"{option} in {path} {said}"
    assert not (tmp_path / "out").exists() and not (tmp_path / "123").exists()


@pytest.mark.parametrize("option", sorted(WRONG_VALUES))
def test_a_value_no_run_can_use_is_refused_in_an_options_file_and_on_the_command_line(
    option, options_file, tmp_path, capsys
):
    value, said = WRONG_VALUES[option]
    assert refused(["finetune", str(options_file({option: value}))], capsys) == said
    arguments = [str(item) for key, item in yaml.safe_load(options_file({}).read_text()).items() for item in (f"--{key}", item)]  # fmt: skip
    assert refused(["finetune", *arguments, f"--{option}", str(value)], capsys) == said
    assert not (tmp_path / "out").exists()


def test_an_options_file_is_read_as_the_command_line_reads_its_values(options_file):
    """Texts are read as the option's type, as on the command line; a mapping where the option takes one."""
    path = options_file({"max_steps": "5", "use_cpu": "yes", "learning_rate": 1, "report_to": "none",
                         "lr_scheduler_kwargs": {"power": 2.0}, "eval_strategy": "steps", "seed": "7"})  # fmt: skip
    _, data_args, _, training_args = parsed_arguments(build_argument_parser(), [str(path)])
    assert (training_args.max_steps, training_args.use_cpu, training_args.learning_rate) == (5, True, 1.0)
    assert (training_args.seed, training_args.report_to, training_args.lr_scheduler_kwargs) == (7, [], {"power": 2.0})
    assert training_args.eval_strategy == "steps" and data_args.max_seq_length == 16
    assert type(training_args.learning_rate) is float


# Runs `hf-norms ARGV` for each ARGV of a JSON list on stdin, in one process; prints [[status, the fine-tuning modules
# imported so far], ...]
EACH_COMMAND = (
    "import json, sys\n"
    "from hf_norms import cli\n"
    "results = []\n"
    "for argv in json.loads(sys.stdin.read()):\n"
    "    status = cli.main(argv)\n"
    "    results.append([status, sorted(m for m in ('datasets', 'hf_norms.training.finetune') if m in sys.modules)])\n"
    "print(json.dumps(results))\n"
)


def each_command(cases: list[list[str]], folder: Path) -> tuple[list, list[str]]:
    """([[status, modules], ...], the stderr lines) of `hf-norms ARGV` for each of `cases`, in one process."""
    result = subprocess.run([sys.executable, "-c", EACH_COMMAND], input=json.dumps(cases), capture_output=True,
                            text=True, timeout=120, cwd=folder)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout), result.stderr.splitlines()


def test_an_options_file_that_is_not_a_regular_file_is_refused_without_opening_it(tmp_path):
    """A FIFO as the options file used to hang (reading waits for a writer); a folder named .yaml is refused too."""
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "folder.yaml").mkdir()
    names = ["fifo.json", "folder.yaml"]
    results, lines = each_command([["finetune", str(tmp_path / name)] for name in names], tmp_path)
    assert [status for status, _ in results] == [2, 2]
    assert lines == [
        f"hf-norms finetune: error: {tmp_path / name} is not a regular file; give a .json or .yaml file of options, "
        "as `hf-norms finetune --help` lists them."
        for name in names
    ]


def test_finetune_without_a_model_answers_before_the_training_code_is_imported(tmp_path):
    """`hf-norms finetune` with no model (or two), on the command line or in a file, says what is missing before the
    fine-tuning code (datasets, the Trainer) is imported: that import was a fifth of the 5.4 CPU-seconds it took."""
    (tmp_path / "options.yaml").write_text("output_dir: out\n")
    cases = [["finetune"], ["finetune", "--output_dir", "out"], ["finetune", str(tmp_path / "options.yaml")],
             ["finetune", "--model_type", "vit_norm", "--model-name-or-path", "x"]]  # fmt: skip
    results, lines = each_command(cases, tmp_path)
    assert results == [[2, []]] * len(cases) and not (tmp_path / "out").exists()
    assert lines == [
        "hf-norms finetune: error: Give exactly one of model_name_or_path (fine-tune a checkpoint) and model_type "
        "(train from scratch)."
    ] * len(cases)


@pytest.mark.parametrize("text", ["[1]", "power=2"])
def test_keyword_options_that_are_not_a_mapping_are_one_line_before_anything_is_created(
    text, options_file, tmp_path, capsys
):
    """`--lr_scheduler_kwargs '[1]'` was kept as text by TrainingArguments and failed as `**'[1]'` once the output
    folder was made; on the command line and in a file it is refused first."""
    said = (f"lr_scheduler_kwargs must be a mapping (on the command line, the JSON text of one, such as "
            f"'{{\"power\": 2.0}}'), got {text!r}.")  # fmt: skip
    assert refused(["finetune", str(options_file({"lr_scheduler_kwargs": text}))], capsys) == said
    arguments = [str(item) for key, item in yaml.safe_load(options_file({}).read_text()).items() for item in (f"--{key}", item)]  # fmt: skip
    assert refused(["finetune", *arguments, "--lr_scheduler_kwargs", text], capsys) == said
    assert not (tmp_path / "out").exists()
