"""Convert a LayerNorm model of a registered family (any head) into any norm_type, with a fidelity report.

    hf-norms convert SRC --norm-type T --output DIR [--option KEY=VALUE ...] [--calibration-data DATA] [--fold]
    converted = hf_norms.convert_model(model, "dtn")            # in memory; converted.conversion_report

- Norms with function-preserving options (`sepnorm`, `dtn`, `lape`, `layernorm`; the registry's
  `preserving_options`) convert exactly by default: SepNorm with a LayerNorm for both parts, each a copy of the
  original; DTN with both gates at 1; LaPE keeping the input position embedding and starting every position norm at
  weight 0, bias 0. Other option values give a `naive` (inexact) conversion, ready for healing.
- Norms exact on a centred residual stream (the registry's `exact_when_centred`) convert exactly in the families that
  can centre it (pre-LN, with `FamilySpec.residual`) once every write into the residual stream is made mean-free (`residual_stream.center_residual_stream`).
- The others need calibration data (`dyt`, `derf`; the registry's `calibration`): the naive swap (LN gamma/beta
  copied, the rest at its inits) is measured, then every converted layer is calibrated in forward order
  (`calibration.calibrate_norms`), DyT's and Derf's with one alpha (and shift) per channel by default. The
  calibrated model is then healed by distillation from the original for `heal_steps` optimizer steps (default 300,
  `healed_conversion`), on the calibration data less the evaluation examples; `heal_steps=0` returns it calibrated
  only, and its report and card say so. `hf-norms heal` heals further.
- `--fold` moves the norms' gamma/beta into the Linear layers that read them (pre-LN families only, see `folding`).

`convert_model` converts a model object and leaves it as it was. `convert` reads a checkpoint folder or Hub id (only
reading it) and writes a normal checkpoint (config, safetensors weights, tokenizer or image processor, remote code, a
sentence-transformers source's pipeline files, `conversion_report.{json,md,png}`) to a staging folder that moves into
place when complete. An exact, unfolded conversion of a safetensors checkpoint holds no copy of the weights and writes
them in files like the source's (`sharded`).
"""

from __future__ import annotations

import copy
import dataclasses
import os
from contextlib import nullcontext
from typing import Any

import torch
from huggingface_hub.errors import StrictDataclassError
from torch import nn

from ..errors import ConversionError, one_line, require_type
from ..models.family_registry import MODEL_CLASSES
from ..models.family_spec import FamilySpec
from ..models.norm_options import NormOptions
from ..norms.build import NEW_PARAMETER_SUFFIXES, NORM_TYPES, NormSpec, function_preserving_options, norm_spec
from ..output_folders import PlannedOutput, checkpoint_files
from ..readers import read_json_object
from ..version import VERSION
from .arguments import ConversionOptions, ConvertArguments, split_options
from .calibration import calibrate_norms, norms_in_forward_order
from .checkpoint_io import resolve_source
from .data import (
    Examples,
    check_data,
    encode_batches,
    fitting_max_length,
    load_examples,
    model_device,
    probe_examples,
)
from .devices import resolve_device
from .downstream import CheckData, DownstreamChecks, check_out_of_domain, data_places, local_data, with_downstream
from .fidelity import measure_fidelity
from .folding import check_foldable, fold_and_check
from .healed_conversion import heal_converted
from .layer_choice import layer_plan, sweep_layernorm_layers
from .progress import StageLines
from .report import set_fine_tuning_config, write_report
from .residual_stream import center_residual_stream
from .retrieval import RetrievalCheck, measure_retrieval
from .sharded import MappedWeights, drop_pages_after_reading, pages_dropped_after_use, save_like_source
from .sources import (
    SourceModel,
    copy_sentence_transformers_files,
    describe_model,
    inspect_source,
    load_processor,
    load_teacher,
    own_max_length,
    quiet_transformers,
    save_checkpoint,
    sentence_transformers_files,
)

RAW_PROBES = "built-in probe inputs (no processor)"
# what encodes each modality's data: its name, the Auto class that loads it and the file it is saved as
PROCESSORS = {
    "text": ("tokenizer", "AutoTokenizer", "tokenizer.json"),
    "image": ("image processor", "AutoImageProcessor", "preprocessor_config.json"),
}
DEFAULT_MAX_LENGTH = 128  # tokens per text, for a model converted in memory
OPTION_FIELDS = {f.name: f for f in dataclasses.fields(NormOptions)}


def needs_calibration(spec: NormSpec, family: FamilySpec) -> bool:
    """Whether a conversion of a `family` checkpoint to `spec` is calibrated on data: it cannot compute what
    LayerNorm did (DyT, Derf: no statistics)."""
    return spec.calibration is not None and not spec.centres(family)


def norm_options(norm_type: str, options: dict[str, Any] | None, family: FamilySpec) -> tuple[dict[str, Any], bool]:
    """The norm options a conversion of a `family` checkpoint uses (the function-preserving ones, the norm's
    conversion defaults, then the user's), and whether they make it exact."""
    if norm_type not in NORM_TYPES:
        raise ConversionError(f"norm_type {norm_type!r} is not supported; choose one of {sorted(NORM_TYPES)}.")
    spec = NORM_TYPES[norm_type]
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTION_FIELDS) | ({"norm_type"} & set(options)))
    if unknown:
        raise ConversionError(
            f"Unknown norm option(s) {unknown}; options are {sorted(set(OPTION_FIELDS) - {'norm_type'})}."
        )
    merged = {**(function_preserving_options(norm_type) or {}), **spec.conversion_options, **options}
    return merged, spec.converts_exactly(family, merged)


def evaluation_examples(
    modality: str, arguments: ConversionOptions, calibration: Examples | None
) -> tuple[Examples, int]:
    """Evaluation examples and their start index: the given data; else the calibration data's examples after the
    calibration samples (held out); else the built-in probes."""
    evaluation_samples, calibration_samples = arguments.evaluation_samples, arguments.calibration_samples
    if arguments.evaluation_data is not None:
        column = arguments.data_column(modality)
        return load_examples(arguments.evaluation_data, modality, evaluation_samples, column), 0
    if calibration is not None and len(calibration) > calibration_samples:
        return calibration.take(calibration_samples, evaluation_samples), calibration_samples
    if calibration is not None:
        raise ConversionError(
            f"The calibration data has only {len(calibration)} examples, none left over for evaluation after "
            f"{calibration_samples} calibration samples: give evaluation data or fewer calibration samples."
        )
    return probe_examples(modality), 0


def check_finite_weights(model: nn.Module, source: str) -> None:
    """Refuse a source whose weights hold NaN or infinity, naming the first such tensor. A tensor's sum is finite when
    all its values are (NaN and infinity propagate), and summing is much faster than testing every value; only a
    non-finite sum, which huge finite values could also give, is checked value by value."""
    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point() and not torch.isfinite(tensor.sum()) and not torch.isfinite(tensor).all():
            raise ConversionError(f"{source}: tensor {name!r} holds NaN or infinite values; the checkpoint is broken.")
        drop_pages_after_reading(tensor)


def convert_model(
    model: nn.Module,
    norm_type: str,
    calibration_data: Any = None,
    *,
    processor: Any = None,
    share_weights: bool = False,
    **options: Any,
) -> nn.Module:
    """`model` (a LayerNorm model of a registered family, any head: a stock transformers class, or an hf-norms class with
    `norm_type="layernorm"`) converted to `norm_type` in memory, as `hf-norms convert` converts a folder.

    `options` are `ConversionOptions` fields (`evaluation_data`, `calibration_samples`, `fold`, `keep_layernorm`,
    `target_cosine`, `ood_evaluation_data`, `probe_data`, ...; see there) and norm options over the function-preserving
    defaults (`dtn_gate_init=0.5`, ...). `calibration_data` (required where the norm is calibrated: DyT, Derf) and
    `evaluation_data` are what `data.load_examples` takes (texts, images, a `.txt` file, an image folder, a
    `datasets.Dataset`), encoded with `processor` (the model's tokenizer or image processor). Without evaluation data
    the calibration examples after the first `calibration_samples` are held out for evaluation, or built-in probe
    inputs are used. A calibrated conversion (DyT, Derf) is healed by distillation from `model` for `heal_steps`
    optimizer steps (default 300, a fixed seed: the same weights on a busy machine) on the calibration data less the
    evaluation examples, as `hf-norms convert` heals it; `heal_steps=0` returns it calibrated only, which fine-tunes
    several points below its source (the report's `heal_steps` and the card say so). `model` is left as it was. The
    conversion runs on the model's device. The returned model (the
    matching hf-norms class, on that device) carries the fidelity report as `conversion_report`, the dict
    `hf-norms convert` writes as `conversion_report.json`.

    `share_weights=True` (exact conversions that edit no weight only) gives the converted model `model`'s tensors
    instead of copies: half the memory, but the two models are then tied, so training one edits the other. `convert`
    uses it, since the model it converts is its own.
    """
    require_type("model", model, nn.Module, "a transformers model object (to convert a folder, use hf_norms.convert)")
    require_type("norm_type", norm_type, str, f"one of {sorted(NORM_TYPES)}")
    conversion, norm_options_given = split_options(ConversionOptions, options)
    arguments = ConversionOptions(calibration_data=calibration_data, **conversion)
    stage = StageLines("hf_norms.convert_model", arguments.progress)
    stage.expect(conversion_stages(norm_type, describe_model(model).family, arguments))
    return convert_with(model, norm_type, arguments, norm_options_given, processor, share_weights, stage)


def convert_with(
    model: nn.Module, norm_type: str, arguments: ConversionOptions, options: dict[str, Any], processor: Any,
    share_weights: bool, stage: StageLines,
) -> nn.Module:  # fmt: skip
    """`convert_model` with its options parsed: `arguments` the conversion's, `options` the norm's; each stage is
    announced by `stage`."""
    max_length = fitting_max_length(model.config, arguments.max_length or DEFAULT_MAX_LENGTH)
    source = describe_model(model)
    merged, exact = norm_options(norm_type, options, source.family)
    merged.update(layer_plan(norm_type, model.config.num_hidden_layers, arguments.keep_layernorm,
                             arguments.target_cosine, exact, options))  # fmt: skip
    config = student_config(model, source, norm_type, merged)  # the gate: what follows asks the config
    check_calibration_data(config.norm_spec, source.family, arguments.calibration_data)
    check_foldable(source.family, arguments.fold)
    centered = config.norm_spec.centres(source.family)
    if share_weights and (arguments.fold or centered or not exact):
        raise ConversionError(
            "share_weights=True needs an exact conversion that edits no weight: without fold, and not one that centres "
            "the residual stream."
        )
    check_finite_weights(model, source.architecture)
    calibrated = config.norm_spec if needs_calibration(config.norm_spec, source.family) else None
    teacher = model if next(model.parameters()).dtype == torch.float32 else copy.deepcopy(model).float()
    training = teacher.training
    stage("reading and encoding the evaluation and calibration data")
    data = ConversionData.load(teacher.config, source.modality, processor, arguments, max_length)
    stage(f"building the {norm_type} model")
    student = build_student(teacher, source, config, share_weights=share_weights)
    if centered:  # exact once the residual stream is free of its mean (`residual_stream`)
        center_residual_stream(student)
    norm_names = norms_in_forward_order(teacher, data.evaluation_batches[0])
    try:
        stages, calibration = measure_stages(student, teacher, data, norm_names, calibrated, exact, stage)
        if arguments.target_cosine is not None:
            stage(f"choosing the layers that keep LayerNorm for a cosine of {arguments.target_cosine}")
            student, layer_sweep = choose_layernorm_layers(student, teacher, source, merged, data, norm_names,
                                                           arguments.target_cosine, stages)  # fmt: skip
    finally:
        teacher.train(training)
    student.conversion_report = {
        "hf_norms_version": VERSION, "source": getattr(model, "name_or_path", "") or source.architecture,
        "source_revision": None, "family": source.family.name, "architecture": source.norm_architecture,
        "norm_type": norm_type, "exact": exact, "options": {name: getattr(student.config, name) for name in OPTION_FIELDS},
        "folded": arguments.fold, "calibration": calibration, "healing": None,
        "evaluation": data.evaluation_record(max_length), **data.downstream.records(), "stages": stages,
        **({"layer_sweep": layer_sweep} if arguments.target_cosine is not None else {}),
        **({"heal_steps": arguments.heal_steps} if calibrated else {}),
    }  # fmt: skip
    if calibrated and arguments.heal_steps:
        stage(
            f"healing by distillation from the source, {arguments.heal_steps} steps (--heal-steps 0: calibrated only)"
        )
        student = heal_converted(student, teacher, processor, arguments, data.evaluation)
    if arguments.fold:
        student.conversion_report["folding"] = fold_and_check(student, data.evaluation_batches)
    return student


def conversion_stages(norm_type: str, family: FamilySpec, arguments: ConversionOptions) -> int:
    """How many stages `convert_with` announces: data, build, measure (and calibrate, measure again; choose layers;
    heal)."""
    calibrated = needs_calibration(norm_spec(norm_type), family)
    return 3 + 2 * calibrated + (arguments.target_cosine is not None) + (calibrated and arguments.heal_steps > 0)


def check_calibration_data(spec: NormSpec, family: FamilySpec, calibration_data: Any) -> None:
    if needs_calibration(spec, family) and calibration_data is None:
        raise ConversionError(
            f"{spec.name!r} cannot reproduce LayerNorm without calibration: give calibration data (--calibration-data: "
            "a .txt, .csv, .json/.jsonl or .parquet file, a folder of images, or a saved datasets folder)."
        )


def choose_layernorm_layers(
    student: nn.Module, teacher: nn.Module, source: SourceModel, options: dict[str, Any], data: ConversionData,
    norm_names: list[str], target_cosine: float, stages: dict[str, Any],
) -> tuple[nn.Module, dict[str, Any]]:  # fmt: skip
    """`layer_choice.sweep_layernorm_layers` on the calibrated `student`, with variants built like `build_student`;
    the last of `stages` (`calibrated`, or `naive` where nothing is calibrated) is measured again on the chosen one."""
    if data.calibration_batches is None:
        raise ConversionError("--target-cosine measures on the calibration data: give --calibration-data.")

    def build(types: list[str] | None) -> nn.Module:
        options_with_types = {**options, "layer_norm_types": types}
        return build_student(
            teacher, source, student_config(teacher, source, student.config.norm_type, options_with_types)
        )

    batches = {"calibration": data.calibration_batches, "evaluation": data.evaluation_batches}
    chosen, sweep = sweep_layernorm_layers(student, teacher, norm_names, build, batches, target_cosine)
    measured = measure_fidelity(chosen, teacher, data.evaluation_batches, norm_names)
    stages[list(stages)[-1]] = with_downstream(measured, data.downstream, chosen, teacher)
    return chosen, sweep


def own_copy(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Copies of the tensors: the student must not share storage with the teacher (calibrating it would edit both)."""
    return {name: tensor.detach().clone() for name, tensor in state_dict.items()}


def student_config(teacher: nn.Module, source: SourceModel, norm_type: str, options: dict[str, Any]) -> NormOptions:
    """The converted model's config: the teacher's, with `norm_type` and the norm `options`, validated by the config
    (the one gate of the norm options; what follows asks the config, `config.norm_spec`). An option that does not fit
    this model is a `ConversionError` of one line."""
    config_class = MODEL_CLASSES[source.norm_architecture].config_class
    try:
        return config_class.from_dict(
            {**teacher.config.to_dict(), "architectures": [source.norm_architecture], "norm_type": norm_type, **options}
        )
    except (ValueError, StrictDataclassError) as error:
        raise ConversionError(
            f"norm_type={norm_type!r} with options {options} does not fit {source.architecture}: {one_line(error)}"
        ) from None


def build_student(
    teacher: nn.Module, source: SourceModel, config: NormOptions, share_weights: bool = False
) -> nn.Module:
    """The teacher's weights in the hf-norms class of `config` (`student_config`), copied (or, with `share_weights`,
    its very tensors); only the parameters the norm adds may be missing (they get their documented initial values,
    e.g. SepNorm's prefix norm a copy of the loaded LayerNorm)."""
    model_class = MODEL_CLASSES[source.norm_architecture]
    torch.manual_seed(0)
    with quiet_transformers():
        student, info = model_class.from_pretrained(
            None,
            config=config,
            state_dict=teacher.state_dict() if share_weights else own_copy(teacher.state_dict()),
            output_loading_info=True,
            **source.pooler_option,
        )
    unexpected_missing = [key for key in info["missing_keys"] if not key.endswith(NEW_PARAMETER_SUFFIXES)]
    if unexpected_missing or info["mismatched_keys"] or info["unexpected_keys"]:
        raise ConversionError(
            f"{source.architecture} does not fit {source.norm_architecture}: missing {sorted(unexpected_missing)[:5]}, "
            f"unexpected {sorted(info['unexpected_keys'])[:5]}, mismatched {sorted(info['mismatched_keys'])[:5]}."
        )
    student.name_or_path = getattr(teacher, "name_or_path", "")
    return student.to(model_device(teacher)).eval()


def convert(source: str | os.PathLike, norm_type: str, output: str | os.PathLike, **options: Any) -> dict[str, Any]:
    """Convert the LayerNorm checkpoint `source` (folder or Hub id) to `norm_type` and save it to `output`; `options`
    are the fields of `ConvertArguments` (`options` for the norm's, `calibration_data`, `overwrite`, `device`, ...).
    Returns the report that is also written beside the checkpoint (`convert_checkpoint`)."""
    return convert_checkpoint(ConvertArguments(source=source, norm_type=norm_type, output=output, **options))


def convert_checkpoint(arguments: ConvertArguments) -> dict[str, Any]:
    """`hf-norms convert`: the conversion is `convert_model`'s, on the checkpoint's model with its own tokenizer or
    image processor, loaded on `arguments.device` (`devices.resolve_device`: `"auto"` is a CUDA GPU when there is one,
    else the CPU), with texts cut to `max_length` tokens (default: the length the source is used at,
    `sources.own_max_length`: a sentence-transformers model's `max_seq_length`, else 128). The output is checked
    before any work (`output_folders`); the source, the data and the working directory are never written.

    An exact conversion that edits no weight of a safetensors checkpoint maps the source's files instead of loading
    them, lets the converted model share their tensors, drops each module's pages once used, and writes the weights in
    files like the source's (`sharded`): its peak memory is about the libraries' plus a layer's, not twice the
    checkpoint.
    """
    a = arguments
    target = resolve_device(a.device)
    checkpoint = resolve_source(a.source, revision=a.revision, allow_pickle=a.allow_pickle, token=a.token)
    source_model = inspect_source(checkpoint)
    if a.max_length is None:
        a = dataclasses.replace(a, max_length=own_max_length(checkpoint.path))
    exact = norm_options(a.norm_type, a.options, source_model.family)[1]  # a wrong norm_type or option: before loading
    layers = read_json_object(checkpoint.path / "config.json", "the checkpoint's config must be a JSON object")
    if isinstance(layers.get("num_hidden_layers"), int):  # a layer choice that does not fit: before loading too
        layer_plan(a.norm_type, layers["num_hidden_layers"], a.keep_layernorm, a.target_cosine, exact, a.options)
    check_foldable(source_model.family, a.fold)
    for data in (a.calibration_data, a.evaluation_data):  # a data mistake: one line before any model loads
        check_data(data, source_model.modality, a.data_column(source_model.modality))
    protected = {"the source": checkpoint.path,
                 **data_places(calibration_data=a.calibration_data, evaluation_data=a.evaluation_data),
                 **data_places(**local_data(ood_evaluation_data=a.ood_evaluation_data))}  # fmt: skip
    planned = PlannedOutput.check(a.output, a.overwrite, protected)  # before the slow part; again at the move
    # the sentence-transformers files are copied at the end: a link out of the source is refused now
    checkpoint_files(checkpoint.path, sentence_transformers_files(checkpoint.path))

    processor = load_processor(checkpoint.path, source_model.modality)
    retrieval_measured = bool(a.retrieval_samples) and bool(sentence_transformers_files(checkpoint.path))
    stage = StageLines("hf-norms convert", a.progress)
    stage.expect(2 + retrieval_measured + conversion_stages(a.norm_type, source_model.family, a))
    with planned.staged("convert") as staging:  # made before the slow part: a staging name or parent that fails, now
        centered = norm_spec(a.norm_type).centres(source_model.family)  # edits the weights
        mapped = exact and not (a.fold or centered or checkpoint.uses_pickle) and target.type == "cpu"
        weights = MappedWeights(checkpoint.path) if mapped else None
        stage(f"loading the source checkpoint ({source_model.architecture})")
        teacher = load_teacher(checkpoint, source_model, weights.tensors if weights else None).to(target)
        with pages_dropped_after_use(weights) if weights else nullcontext():
            student = convert_with(teacher, a.norm_type, a, a.options or {}, processor, mapped, stage)
        report = student.conversion_report
        report["source"] = str(checkpoint.path) if checkpoint.revision is None else checkpoint.source
        report["source_revision"] = checkpoint.revision
        if retrieval_measured:
            stage("measuring retrieval with the source's sentence-transformers pipeline")
        retrieval = RetrievalCheck.load(checkpoint.path, a.retrieval_samples, a.batch_size)
        measure_retrieval(report, retrieval, student, teacher)
        set_fine_tuning_config(student, report)
        stage(f"writing the checkpoint and its report to {staging.name}")
        if weights:
            save_like_source(student, processor, staging, weights)
        else:
            save_checkpoint(student, processor, staging)
        copy_sentence_transformers_files(checkpoint.path, staging)
        write_report(staging, report)
    return report


@dataclasses.dataclass
class ConversionData:
    """The examples a conversion evaluates on (and calibrates on), encoded as model inputs."""

    modality: str
    evaluation: Examples
    evaluation_start: int
    evaluation_batches: list[dict]
    calibration: Examples | None
    calibration_batches: list[dict] | None
    downstream: DownstreamChecks | None = None  # out-of-domain and probe checks, measured at every stage
    column: str | None = None  # the data file's column the examples were read from, where one was named

    @classmethod
    def load(cls, config, modality: str, processor, arguments: ConversionOptions, max_length: int) -> ConversionData:
        """Load and encode the data `arguments` name, and the downstream checks; without a tokenizer or image
        processor, fixed random inputs still compare the two models."""
        # read as far as needed: without evaluation data, the examples after the calibration samples are evaluated on
        a = arguments
        count = a.calibration_samples + (a.evaluation_samples if a.evaluation_data is None else 0)
        calibration = (
            None if a.calibration_data is None
            else load_examples(a.calibration_data, modality, count, a.data_column(modality))
        )  # fmt: skip
        if (calibration is not None or a.evaluation_data is not None) and processor is None:
            needed, loader, written = PROCESSORS[modality]
            raise ConversionError(
                f"The data needs the model's {needed} to encode it, and the checkpoint has none: save the one it was "
                f"trained with into the checkpoint folder (`{loader}.from_pretrained(ID).save_pretrained(FOLDER)` "
                f"writes {written}) and convert again (in Python: convert_model(..., processor=...))."
            )
        if processor is None:
            batches = [raw_probe_batch(config)]
            examples = Examples([None] * len(next(iter(batches[0].values()))), RAW_PROBES, modality)
            data = cls(modality, examples, 0, batches, None, None)
        else:
            evaluation, start = evaluation_examples(modality, a, calibration)
            calibration_batches = None
            if calibration is not None:
                calibration = calibration.take(0, a.calibration_samples)
                calibration_batches = encode_batches(processor, calibration, a.batch_size, max_length)
            data = cls(modality, evaluation, start, encode_batches(processor, evaluation, a.batch_size, max_length),
                       calibration, calibration_batches)  # fmt: skip
        check_out_of_domain(a.ood_evaluation_data, calibration_data=a.calibration_data,
                            evaluation_data=a.evaluation_data)  # fmt: skip
        checked = CheckData(a.ood_evaluation_data, a.ood_evaluation_samples, a.probe_data, a.probe_samples)
        data.column = a.data_column(modality)
        data.downstream = DownstreamChecks.load(processor, modality, checked, a.batch_size, max_length, data.evaluation)
        return data

    def evaluation_record(self, max_length: int) -> dict[str, Any]:
        return {
            "data": self.evaluation.description,
            "samples": len(self.evaluation),
            "start": self.evaluation_start,
            "max_length": max_length,
            "pooling": "mean" if self.modality == "text" else "cls",
            **({"column": self.column} if self.column else {}),
        }


def measure_stages(
    student: nn.Module,
    teacher: nn.Module,
    data: ConversionData,
    norm_names: list[str],
    calibration: NormSpec | None,
    exact: bool,
    stage: StageLines,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The fidelity of each stage (`exact`, or `naive` then, with a `calibration` (the spec of a norm that is
    calibrated), `calibrated`, calibrating on the way the norms of `norm_names` that are not LayerNorm), and the
    calibration's record."""
    examples = sum(len(next(iter(batch.values()))) for batch in data.evaluation_batches)
    checks = " and the downstream checks" if data.downstream is not None and data.downstream.active else ""

    def measure(what: str) -> dict[str, Any]:
        stage(f"measuring the {what} conversion on {examples} examples{checks}")
        measured = measure_fidelity(student, teacher, data.evaluation_batches, norm_names, stage.enabled)
        return with_downstream(measured, data.downstream, student, teacher)

    if calibration is None:
        return {"exact" if exact else "naive": measure("exact" if exact else "naive")}, None
    stages = {"naive": measure("naive")}
    replaced = [name for name in norm_names if not isinstance(student.get_submodule(name), nn.LayerNorm)]
    stage(f"calibrating {len(replaced)} norms on {len(data.calibration)} examples")
    result = calibrate_norms(student, teacher, data.calibration_batches, replaced, calibration, stage.enabled)
    stages["calibrated"] = measure("calibrated")
    record = {
        "data": data.calibration.description,
        "samples": len(data.calibration),
        "method": result.method,
        "seconds": round(result.seconds, 3),
    }
    return stages, record


def raw_probe_batch(config) -> dict:
    """Model inputs for a model without tokenizer or image processor: fixed random token ids or pixels."""
    generator = torch.Generator().manual_seed(0)
    if getattr(config, "vocab_size", None):
        input_ids = torch.randint(5, config.vocab_size, (4, 32), generator=generator)
        return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
    size = config.image_size if isinstance(config.image_size, int) else config.image_size[0]
    return {"pixel_values": torch.randn(4, config.num_channels, size, size, generator=generator)}
