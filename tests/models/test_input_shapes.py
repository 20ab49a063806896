"""Every norm_type of every family runs on every input the stock class accepts, with the stock output shapes, and the
exact ones (a stock checkpoint loaded with their function-preserving options) give the stock outputs within 1e-5.

Images: square and non-square configs (a 10 x 14 grid), `interpolate_pos_encoding=True` to larger and non-square
sizes, batch 1 and 2. Text: no padding, right and left padding, and padding-free packed rows (`position_ids`
restarting at 0 for each sequence, as `DataCollatorWithFlattening` makes them). Where the stock class refuses an input
(DINOv2 and CLIP have no non-square configs), the hf-norms class refuses it too.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import pytest
import torch
import transformers
from conftest import EXACT_TYPES, NORM_TYPES, tiny_config

from hf_norms.models.family_registry import FAMILIES
from hf_norms.models.norm_options import NormOptions
from hf_norms.norms.sepnorm import SeparateNorm
from hf_norms.norms.token_layout import TokenLayout, sequence_prefix_mask

NORM_FIELDS = set(NormOptions.__dataclass_fields__)
TOLERANCE = 1e-5
# A norm_type with its own defaults, or with options that change what it computes (every LaPE mode, SepNorm's prefix
# norms); "exact" ones are loaded from the stock checkpoint with their function-preserving options.
FRESH = [
    *[(name, {}) for name in NORM_TYPES],
    ("lape", {"lape_mode": "shared"}),
    ("lape", {"lape_keep_input_pe": True}),
    ("sepnorm", {"sepnorm_prefix_norm": "layernorm"}),
]


@dataclass(frozen=True)
class Shape:
    """One input: a config variant (`config`: overrides of the tiny config), then the call's inputs."""

    name: str
    config: dict = field(default_factory=dict)
    size: tuple[int, int] = (32, 32)  # images: height, width
    batch: int = 2
    interpolate: bool = False
    text: str = "right-padded"  # text: unpadded, right-padded, left-padded, packed


NON_SQUARE = {"image_size": [40, 56], "patch_size": 4, "encoder_stride": 4}  # a 10 x 14 grid
IMAGE_SHAPES = [
    Shape("square"),
    Shape("square-batch-1", batch=1),
    Shape("non-square-config", NON_SQUARE, size=(40, 56)),
    Shape("non-square-config-batch-1", NON_SQUARE, size=(40, 56), batch=1),
    Shape("interpolated-larger", size=(48, 48), interpolate=True),
    Shape("interpolated-non-square", size=(40, 56), interpolate=True, batch=1),  # a 5 x 7 grid from 4 x 4
    Shape("interpolated-at-trained-size", interpolate=True),
]
TEXT_SHAPES = [
    Shape("unpadded-batch-1", batch=1, text="unpadded"),
    Shape("right-padded"),
    Shape("left-padded", text="left-padded"),
    Shape("packed-row", batch=1, text="packed"),
    Shape("packed-rows", text="packed"),
]
# (family, shape) the stock class refuses: its config takes one int image size, or it interpolates a square table
STOCK_REFUSES = {
    ("dinov2", "non-square-config"),
    ("dinov2", "non-square-config-batch-1"),
    ("clipvision", "non-square-config"),
    ("clipvision", "non-square-config-batch-1"),
}
SEQUENCE_LENGTHS = (4, 6, 3)  # the packed sequences of a packed row
pytestmark = pytest.mark.usefixtures("one_thread")


def bare_class(family: str) -> type:
    return next(head for head in FAMILIES[family].heads if head._auto_class == "AutoModel")


def stock_class(family: str) -> type:
    return getattr(transformers, bare_class(family).__name__.replace("Norm", "", 1))


def stock_config(config):
    """The stock config of the same architecture (the norm fields dropped)."""
    config_class = type(config).stock_config_class()
    fields = {
        k: v for k, v in config.to_dict().items() if k not in NORM_FIELDS and k in config_class.__dataclass_fields__
    }
    return config_class(**fields)


def shapes(family: str) -> list[Shape]:
    return TEXT_SHAPES if FAMILIES[family].modality == "text" else IMAGE_SHAPES


def image_call(family: str, shape: Shape) -> dict:
    height, width = shape.size
    call = {"pixel_values": torch.randn(shape.batch, 3, height, width, generator=torch.Generator().manual_seed(0))}
    if shape.interpolate and not FAMILIES[family].any_image_size:  # DINOv2 always interpolates, and takes no flag
        call["interpolate_pos_encoding"] = True
    return call


def text_call(shape: Shape) -> dict:
    """The inputs of a text shape: 9-token rows (padded ones lose 3 tokens), or rows packing three sequences."""
    generator = torch.Generator().manual_seed(0)
    if shape.text == "packed":
        total = sum(SEQUENCE_LENGTHS)
        positions = torch.cat([torch.arange(length) for length in SEQUENCE_LENGTHS])
        return {
            "input_ids": torch.randint(3, 100, (shape.batch, total), generator=generator),
            "position_ids": positions.expand(shape.batch, -1),
        }
    input_ids = torch.randint(3, 100, (shape.batch, 9), generator=generator)
    mask = torch.ones_like(input_ids)
    if shape.text == "right-padded":
        mask[-1, -3:] = 0
    elif shape.text == "left-padded":
        mask[-1, :3] = 0
    input_ids = input_ids.masked_fill(mask == 0, 1)
    return {"input_ids": input_ids, "attention_mask": mask}


def call_for(family: str, shape: Shape) -> dict:
    return text_call(shape) if FAMILIES[family].modality == "text" else image_call(family, shape)


def run(model, call: dict):
    """The model's last hidden state on `call`, or the exception it raised."""
    try:
        with torch.no_grad():
            return model(**call).last_hidden_state
    except (ValueError, RuntimeError, TypeError) as error:
        return error


@pytest.fixture(scope="module")
def stock_runs(tmp_path_factory) -> dict:
    """Per (family, shape name): what the stock bare model (seeded) gives on that shape's call (its last hidden state,
    or the error its config, model or call raised) and the folder of its saved checkpoint (None if refused)."""
    runs, folders = {}, {}
    for family in FAMILIES:
        for shape in shapes(family):
            key = (family, str(shape.config))
            if key not in folders:
                torch.manual_seed(0)
                try:
                    model = stock_class(family)(stock_config(tiny_config(family, "layernorm", **shape.config))).eval()
                except (ValueError, TypeError) as error:  # a config the stock config refuses
                    folders[key] = (error, None)
                else:
                    folders[key] = (model, tmp_path_factory.mktemp(f"{family}-stock"))
                    model.save_pretrained(folders[key][1])
            model, folder = folders[key]
            expected = model if isinstance(model, Exception) else run(model, call_for(family, shape))
            runs[family, shape.name] = (expected, folder)
    return runs


def check_shapes(family: str, build, stock_runs: dict, exact: bool) -> None:
    """`build(config variant, stock checkpoint)` gives the hf-norms model: on each shape of the family it runs where
    the stock model runs (and fails where it fails), with the stock output shape, and within 1e-5 of it if `exact`."""
    built = {}
    for shape in shapes(family):
        expected, folder = stock_runs[family, shape.name]
        refused = (family, shape.name) in STOCK_REFUSES
        assert isinstance(expected, Exception) == refused, f"{shape.name}: the stock model gave {expected!r}"
        if str(shape.config) not in built:
            try:
                built[str(shape.config)] = build(shape.config, folder).eval()
            except (ValueError, TypeError) as error:
                built[str(shape.config)] = error
        model = built[str(shape.config)]
        got = model if isinstance(model, Exception) else run(model, call_for(family, shape))
        if refused:
            assert isinstance(got, Exception), f"{shape.name}: runs where the stock model refuses it"
            continue
        assert isinstance(got, torch.Tensor), f"{shape.name}: {got!r} where the stock model runs"
        assert got.shape == expected.shape, shape.name
        if exact:
            assert (got - expected).abs().max().item() <= TOLERANCE, shape.name


@pytest.mark.parametrize(("norm_type", "options"), FRESH, ids=lambda value: value if isinstance(value, str) else "")
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_norm_type_runs_on_every_input_the_stock_class_accepts(family, norm_type, options, stock_runs):
    def build(variant, folder):
        torch.manual_seed(0)
        return bare_class(family)(tiny_config(family, norm_type, **options, **variant))

    check_shapes(family, build, stock_runs, exact=False)


@pytest.mark.parametrize("norm_type", ["layernorm", *EXACT_TYPES])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_exact_norm_types_give_the_stock_outputs_on_every_input(family, norm_type, stock_runs):
    def build(variant, folder):  # no folder: a config the stock config refuses
        if folder is None:
            return bare_class(family)(tiny_config(family, norm_type, **variant))
        return bare_class(family).from_pretrained(folder, norm_type=norm_type)

    check_shapes(family, build, stock_runs, exact=True)


def sepnorm_model(family: str, prefix_norm: str):
    """A SepNorm model whose prefix norms differ from its token norms (so that taking a token for [CLS] shows), in
    eval mode: BatchNorm prefix norms with running statistics off their initial values."""
    torch.manual_seed(0)
    model = bare_class(family)(tiny_config(family, "sepnorm", sepnorm_prefix_norm=prefix_norm)).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, SeparateNorm):
                module.prefix_norm.weight.uniform_(0.5, 2.0)
                module.prefix_norm.bias.uniform_(-1.0, 1.0)
                if prefix_norm == "batchnorm":
                    module.prefix_norm.running_mean.uniform_(-1.0, 1.0)
                    module.prefix_norm.running_var.uniform_(0.5, 2.0)
    return model


TEXT_FAMILIES = sorted(name for name, spec in FAMILIES.items() if spec.modality == "text")


@pytest.mark.parametrize("prefix_norm", ["layernorm", "batchnorm"])
@pytest.mark.parametrize("family", TEXT_FAMILIES)
def test_sepnorm_on_packed_rows_is_sepnorm_on_each_sequence(family, prefix_norm):
    """Padding-free rows (`position_ids` restarting at 0): each packed sequence's first token is its [CLS]."""
    model = sepnorm_model(family, prefix_norm)
    sequences = [torch.randint(3, 100, (1, n), generator=torch.Generator().manual_seed(n)) for n in SEQUENCE_LENGTHS]
    positions = torch.cat([torch.arange(n) for n in SEQUENCE_LENGTHS]).unsqueeze(0)
    with torch.no_grad():
        packed = model(input_ids=torch.cat(sequences, dim=1), position_ids=positions).last_hidden_state
        each = torch.cat([model(input_ids=ids, position_ids=torch.arange(ids.shape[1])[None]).last_hidden_state
                          for ids in sequences], dim=1)  # fmt: skip
    assert (packed - each).abs().max().item() <= TOLERANCE


@pytest.mark.parametrize("prefix_norm", ["layernorm", "batchnorm"])
@pytest.mark.parametrize("family", TEXT_FAMILIES)
def test_sepnorm_with_left_padding_is_sepnorm_on_the_unpadded_sequence(family, prefix_norm):
    """A row padded on the left has its [CLS] at its first real token, found from the attention mask."""
    model = sepnorm_model(family, prefix_norm)
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(3, 100, (2, 9), generator=generator)
    mask = torch.ones_like(input_ids)
    mask[1, :3] = 0
    positions = torch.arange(9).expand(2, -1)  # as the stock model numbers a left-padded row: pads included
    with torch.no_grad():
        padded = model(input_ids=input_ids, attention_mask=mask, position_ids=positions).last_hidden_state
        alone = model(input_ids=input_ids[1:, 3:], position_ids=positions[1:, 3:]).last_hidden_state
    assert (padded[1, 3:] - alone[0]).abs().max().item() <= TOLERANCE


def test_sepnorm_batch_statistics_on_packed_rows_are_those_of_the_sequences_batched():
    """In training, a BatchNorm prefix norm normalises the prefix tokens of the batch's sequences together: a packed
    row of three sequences gives what the three sequences padded into a batch of three give, running statistics too."""
    torch.manual_seed(0)
    packed_norm = SeparateNorm(48, 1, prefix_norm="batchnorm").train()
    batched_norm = copy.deepcopy(packed_norm)
    sequences = [torch.randn(n, 48) * 3 + 1 for n in SEQUENCE_LENGTHS]
    positions = torch.cat([torch.arange(n) for n in SEQUENCE_LENGTHS]).unsqueeze(0)
    packed_states = torch.cat(sequences).unsqueeze(0)
    prefix_mask = sequence_prefix_mask(1, None, positions, packed_states.shape[:2])
    packed = packed_norm(packed_states, TokenLayout(1, (1, packed_states.shape[1] - 1), None, prefix_mask))
    longest = max(SEQUENCE_LENGTHS)
    batch = torch.stack([torch.cat([states, torch.zeros(longest - len(states), 48)]) for states in sequences])
    batched = batched_norm(batch, TokenLayout(1, (1, longest - 1)))
    unpadded = torch.cat([row[:n] for row, n in zip(batched, SEQUENCE_LENGTHS, strict=True)])
    assert prefix_mask.sum().item() == len(SEQUENCE_LENGTHS)
    assert (packed[0] - unpadded).abs().max().item() <= TOLERANCE
    for name in ("running_mean", "running_var"):
        stats = getattr(packed_norm.prefix_norm, name), getattr(batched_norm.prefix_norm, name)
        assert (stats[0] - stats[1]).abs().max().item() <= TOLERANCE, name


def test_compiled_sepnorm_finds_cls_as_eager_does_on_left_padded_and_packed_rows():
    """One graph (`fullgraph=True`) from the call's mask and position ids to SepNorm's output: traced, shapes cannot
    depend on values, so SepNorm picks the prefix rows with `torch.where` (eval) or gathers each row's [CLS] (a
    BatchNorm in training, left padding); packed rows in training are refused in one line."""

    def sepnorm(norm, states, attention_mask, position_ids):
        prefix_mask = sequence_prefix_mask(1, attention_mask, position_ids, states.shape[:2])
        return norm(
            states, TokenLayout(1, (1, states.shape[1] - 1), attention_mask, prefix_mask, attention_mask is None)
        )

    torch._dynamo.reset()
    torch.manual_seed(0)
    norm = SeparateNorm(48, 1, prefix_norm="batchnorm")
    with torch.no_grad():
        norm.prefix_norm.running_mean.uniform_(-1.0, 1.0)
    left = text_call(Shape("left-padded", text="left-padded"))["attention_mask"], None
    packed = None, text_call(Shape("packed-rows", text="packed"))["position_ids"]
    compiled = torch.compile(sepnorm, backend="aot_eager", fullgraph=True)
    for training, (mask, positions) in [(False, left), (False, packed), (True, left)]:
        states = torch.randn(2, (mask if mask is not None else positions).shape[1], 48) * 2 + 1
        eager_norm = copy.deepcopy(norm).train(training)
        expected = sepnorm(eager_norm, states, mask, positions)
        got = compiled(norm.train(training), states, mask, positions)
        assert (got - expected).abs().max().item() <= TOLERANCE, (training, mask is None)
        assert torch.equal(norm.prefix_norm.running_mean, eager_norm.prefix_norm.running_mean)
    with pytest.raises(Exception, match="cannot be traced in training on packed rows"):
        compiled(norm.train(), torch.randn(2, sum(SEQUENCE_LENGTHS), 48), *packed)


@pytest.mark.parametrize(
    ("family", "shape"),
    [
        ("vit", Shape("non-square-config", NON_SQUARE, size=(40, 56))),
        ("deit", Shape("non-square-config", NON_SQUARE, size=(40, 56))),
        ("vit", Shape("interpolated-non-square", size=(40, 56), interpolate=True)),
        ("clipvision", Shape("interpolated-non-square", size=(40, 56), interpolate=True)),
        ("dinov2", Shape("interpolated-non-square", size=(40, 56), interpolate=True)),
    ],
    ids=lambda value: value if isinstance(value, str) else value.name,
)
def test_lape_normalises_the_position_embeddings_the_stock_model_adds(family, shape):
    """LaPE's first layer adds `pe_norm(p)` where `p` is what the stock embeddings add: the table unchanged at the
    trained size (of any grid), the stock interpolation of it when the call asks for another size."""
    torch.manual_seed(0)
    model = bare_class(family)(tiny_config(family, "lape", **shape.config)).eval()
    call = call_for(family, shape)
    with torch.no_grad():
        model(**call)
        context = next(module.norm_context for module in model.modules() if hasattr(module, "norm_context"))
        first = context.per_layer_positions[0]
        stock = stock_class(family)(stock_config(model.config)).eval()
        stock.load_state_dict(model.state_dict(), strict=False)
        embeddings, (height, width) = stock.embeddings, shape.size
        if shape.interpolate:
            tokens = embeddings(
                call["pixel_values"], **({"interpolate_pos_encoding": True} if family != "dinov2" else {})
            )
            positions = type(embeddings).interpolate_pos_encoding(embeddings, tokens, height, width)
        else:
            positions = embeddings.position_embeddings
        expected = model.encoder_layers[0].pe_norm(positions)
    assert first.shape == expected.shape and (first - expected).abs().max().item() <= TOLERANCE
