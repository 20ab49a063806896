"""The remote code of a saved checkpoint: two files, `configuration_<model_type>.py` and `modeling_<model_type>.py`,
written by `save_pretrained` from the package's own modules, as transformers expands a modular file into one
self-contained modeling file.

Each file is the package's modules of its part (`CONFIGURATION_MODULES`, then the family's configuration module; the
modules the checkpoint's norm layers and its family's modeling module reach by relative imports) written one after the
other, with their relative imports left out, each absolute import once, the registry replaced by the checkpoint's own
entries (`registry_source`: the fields a model reads, none of the card's text), what is marked `@package_only` left out,
and only the definitions the checkpoint's classes reach kept (`reachable`): another norm's layer is not among them.
The modeling file imports what it uses of the configuration file, its one relative import, as remote code on the Hub
does; neither imports transformers' private modules (`transformers_internals` is package-only).

Imports neither torch nor transformers; not part of the remote code it writes.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..norms.registry import NORM_TYPES, STOCK

PACKAGE = Path(__file__).parent.parent  # hf_norms/: modules are named below it (`norms.dyt`)
REGISTRY = "norms.registry"
# The package's modules the configuration file is made of, in order, before the family's configuration module; the
# registry stands for the checkpoint's own entries (`registry_source`)
CONFIGURATION_MODULES = ("version_guard", "norms.spec", REGISTRY, "models.norm_options")
# Modules that only the installed package runs: what uses them is marked `@package_only`
PACKAGE_ONLY_MODULES = frozenset(
    {"package_only", "models.checkpoint_code", "models.layernorm_loading", "models.held_notices",
     "models.transformers_internals"}
)  # fmt: skip
PACKAGE_ONLY = "package_only"
# The `NormSpec` fields a checkpoint's remote code reads (the rest serve conversion, training and the cards)
REMOTE_FIELDS = (
    "name", "short_name", "layer_module", "layer_class", "position_norm_class", "options", "per_token",
    "whole_sequence", "keeps_input_position_embeddings",
)  # fmt: skip
UNKNOWN_NORM_TYPE = '''
def unknown_norm_type(value: object) -> str:
    """The one line saying that `value` is not one of the norm types this checkpoint's remote code carries."""
    return (
        f"norm_type={value!r} is not in this checkpoint's remote code, which carries {sorted(NORM_NAMES)} only: "
        "load it with hf_norms installed (`import hf_norms`, without trust_remote_code) for another norm_type."
    )
'''
HEADER = (
    "{part} of an hf-norms checkpoint ({model_type}, norm types {norm_types}), written by hf-norms' `save_pretrained` "
    "from its modules {modules}. `trust_remote_code=True` runs it where hf-norms is not installed; with `import "
    "hf_norms` the checkpoint loads through the package instead. Generated: change the package, not this file."
)


def family_modules(model_type: str) -> tuple[str, str]:
    """The package modules of a family's configuration and model classes (`models.bert.configuration_bert_norm`,
    `models.bert.modeling_bert_norm` for `bert_norm`), whose last parts name the checkpoint's two files. The one place
    that says where they live."""
    folder = f"models.{model_type.removesuffix('_norm')}"
    return f"{folder}.configuration_{model_type}", f"{folder}.modeling_{model_type}"


def file_stem(module: str) -> str:
    """The name, without `.py`, of the remote-code file made from `module` (`modeling_bert_norm`)."""
    return module.rsplit(".", 1)[-1]


def code_file_names(model_type: str) -> tuple[str, str]:
    """The names of the two remote-code files of a checkpoint of `model_type`."""
    return tuple(f"{file_stem(module)}.py" for module in family_modules(model_type))


def module_path(module: str) -> Path:
    return PACKAGE / f"{module.replace('.', '/')}.py"


def checkpoint_norm_types(config: Mapping[str, Any]) -> list[str]:
    """The norm types a model of `config` (a config dict) builds, in the registry's order: its `norm_type` and
    `layer_norm_types`, and LayerNorm where one of them mixes tokens (its task heads keep LayerNorms). Names that are no
    norm_type are left out: the config refuses them itself."""
    per_layer = config.get("layer_norm_types")
    asked = {config.get("norm_type", STOCK), *(per_layer if isinstance(per_layer, list) else [])}
    kinds = [kind for kind in NORM_TYPES if kind in asked]
    if not all(NORM_TYPES[kind].per_token for kind in kinds):
        kinds = [kind for kind in NORM_TYPES if kind in {*kinds, STOCK}]
    return kinds


def parse(module: str) -> tuple[str, ast.Module]:
    source = module_path(module).read_text(encoding="utf-8")
    return source, ast.parse(source)


def relative_imports(module: str, tree: ast.Module) -> list[str]:
    """The modules (named below the package) that `module`'s top-level relative imports name: `from ..norms.dyt
    import DynamicTanh` in `models.norm_placement` names `norms.dyt`."""
    imported = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level and node.module:
            package = module.split(".")[: -node.level]
            imported.append(".".join([*package, node.module]))
    return imported


def ordered_closure(roots: Iterable[str], excluded: frozenset[str]) -> list[str]:
    """`roots` and every module they reach by relative imports, except `excluded`, each after what it imports."""
    order: list[str] = []
    visiting: set[str] = set()

    def visit(module: str) -> None:
        if module in order or module in excluded or module in visiting:
            return
        visiting.add(module)
        for imported in relative_imports(module, parse(module)[1]):
            visit(imported)
        order.append(module)

    for root in roots:
        visit(root)
    return order


def is_package_only(node: ast.AST) -> bool:
    decorators = getattr(node, "decorator_list", [])
    return any(isinstance(decorator, ast.Name) and decorator.id == PACKAGE_ONLY for decorator in decorators)


def assigned_names(node: ast.AST) -> set[str]:
    """The names an assignment binds; none where it assigns to an attribute or an item (a statement with an effect)."""
    if not isinstance(node, (ast.Assign, ast.AnnAssign)):
        return set()
    names: set[str] = set()
    for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
        elements = target.elts if isinstance(target, ast.Tuple) else [target]
        if not all(isinstance(element, ast.Name) for element in elements):
            return set()
        names |= {element.id for element in elements}
    return names


class Statement:
    """One top-level statement of a generated file: its text, the names it binds, the names it reads, and whether it
    is kept for its effect (a call, a registering decorator) rather than for what it defines."""

    def __init__(self, module: str, text: str, node: ast.AST):
        self.module, self.text, self.node = module, text, node
        self.reads = {name.id for name in ast.walk(node) if isinstance(name, ast.Name)}
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            self.binds = {alias.asname or alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            self.binds = {node.name}
        else:
            self.binds = assigned_names(node)
        self.binds_imports = isinstance(node, (ast.Import, ast.ImportFrom))
        self.effect = not self.binds or (isinstance(node, ast.FunctionDef) and bool(node.decorator_list))


def attached_start(lines: list[str], node: ast.AST) -> int:
    """The first line (0-based) of `node` with its decorators and the comment lines right above it."""
    start = min([node.lineno, *(decorator.lineno for decorator in getattr(node, "decorator_list", []))]) - 1
    while start > 0 and lines[start - 1].strip().startswith("#") and "isort" not in lines[start - 1]:
        start -= 1
    return start


def statement_text(lines: list[str], node: ast.AST) -> str:
    """The source of a top-level `node` with its attached comments, less the `@package_only` methods of a class."""
    kept = list(range(attached_start(lines, node), node.end_lineno))
    for child in node.body if isinstance(node, ast.ClassDef) else []:
        if is_package_only(child):
            dropped = set(range(attached_start(lines, child), child.end_lineno))
            kept = [index for index in kept if index not in dropped]
    text = "\n".join(lines[index] for index in kept)
    return re.sub(r"\n\s*\n(\s*\n)+", "\n\n", text)  # a dropped method leaves one blank line


def module_statements(module: str, source: str) -> list[Statement]:
    """The statements of `module` (its `source`) that remote code may keep: all but its docstring, its relative and
    `__future__` imports, `__all__` and what is `@package_only` (a class keeps its other methods)."""
    tree, lines = ast.parse(source), source.splitlines()
    statements = []
    for node in tree.body[1:] if ast.get_docstring(tree, clean=False) else tree.body:
        if isinstance(node, ast.ImportFrom) and (node.level or node.module == "__future__"):
            continue
        if is_package_only(node) or "__all__" in assigned_names(node):
            continue
        text = statement_text(lines, node)
        if isinstance(node, ast.ClassDef):
            node.body = [child for child in node.body if not is_package_only(child)]
        statements.append(Statement(module, text, node))
    return statements


def reachable(statements: list[Statement], roots: set[str]) -> tuple[list[Statement], set[str]]:
    """(the statements kept: those with an effect, those binding a name of `roots`, and every statement binding a name
    that a kept one reads; every name the kept ones read, and `roots`)."""
    binders: dict[str, list[int]] = {}
    for index, statement in enumerate(statements):
        for name in statement.binds:
            binders.setdefault(name, []).append(index)
    kept = {index for index, statement in enumerate(statements) if statement.effect}
    kept |= {index for name in roots for index in binders.get(name, [])}
    needed, pending = set(roots), list(kept)
    while pending:
        for name in statements[pending.pop()].reads - needed:
            needed.add(name)
            for index in set(binders.get(name, [])) - kept:
                kept.add(index)
                pending.append(index)
    return [statements[index] for index in sorted(kept)], needed


def import_header(nodes: list[ast.Import | ast.ImportFrom], needed: set[str]) -> list[str]:
    """The import statements of `nodes` with the aliases that bind a `needed` name, each once, one statement per
    module, sorted by module."""
    plain: set[str] = set()
    named: dict[str, list[ast.alias]] = {}
    for node in nodes:
        for alias in node.names:
            if (alias.asname or alias.name.split(".")[0]) not in needed:
                continue
            if isinstance(node, ast.Import):
                plain.add(ast.unparse(ast.Import(names=[alias])))
            elif ast.dump(alias) not in map(ast.dump, named.setdefault(node.module, [])):
                named[node.module].append(alias)
    froms = [ast.unparse(ast.ImportFrom(module=module, names=aliases, level=0)) for module, aliases in named.items()]
    return sorted(plain | set(froms), key=lambda line: (line.split()[1], line))  # the whole line: a set has no order


def render(statements: list[Statement], needed: set[str]) -> str:
    """The kept statements as a module body: one import header (each needed alias once), then the other statements
    under a comment naming their module."""
    lines = import_header([statement.node for statement in statements if statement.binds_imports], needed)
    module, previous = None, ""
    for statement in statements:
        if statement.binds_imports:
            continue
        definition = isinstance(statement.node, (ast.FunctionDef, ast.ClassDef))
        if statement.module != module:
            module = statement.module
            lines += ["", "", f"# hf_norms/{module.replace('.', '/')}.py"]
        elif definition or previous:
            lines += ["", ""]
        lines.append(statement.text)
        previous = definition
    return "\n".join(lines).strip("\n") + "\n"


def registry_source(norm_types: list[str], modeling_module: str) -> str:
    """The registry of a checkpoint's remote code: its own `norm_types`' entries of `registry.NORM_TYPES` with
    the fields of `REMOTE_FIELDS` only (`layer_module` its modeling file, which defines the layers), what of the
    registry those fields name, `NORM_NAMES`, and an `unknown_norm_type` that says to load another norm with
    hf_norms."""
    source, tree = parse(REGISTRY)
    lines = source.splitlines()
    table = next(node for node in tree.body if "NORM_TYPES" in assigned_names(node))
    entries, reads = [], set()
    for name, call in zip(NORM_TYPES, table.value.values, strict=True):
        if name not in norm_types:
            continue
        fields = []
        for keyword in call.keywords:
            if keyword.arg == "layer_module":
                fields.append(f"layer_module={file_stem(modeling_module)!r}")
            elif keyword.arg in REMOTE_FIELDS:
                fields.append(f"{keyword.arg}={ast.unparse(keyword.value)}")
                reads |= {node.id for node in ast.walk(keyword.value) if isinstance(node, ast.Name)}
        entries.append(f"    {name!r}: NormSpec({', '.join(fields)}),")
    reads.add("STOCK")  # what the registry gives every module besides its table
    helpers = [node for node in tree.body if assigned_names(node) & reads or getattr(node, "name", None) in reads]
    parts = [statement_text(lines, node) for node in helpers]
    parts += ["NORM_TYPES: dict[str, NormSpec] = {\n" + "\n".join(entries) + "\n}", "NORM_NAMES = tuple(NORM_TYPES)"]
    return "\n\n\n".join(parts) + "\n\n" + UNKNOWN_NORM_TYPE


def statements_of(modules: Iterable[str], registry: str) -> list[Statement]:
    """The statements of `modules` in order, `registry` standing for the registry module's."""
    statements = []
    for module in modules:
        source = registry if module == REGISTRY else parse(module)[0]
        statements += module_statements(module, source)
    return statements


def checkpoint_code(config: Mapping[str, Any]) -> dict[str, str]:
    """{file name: text} of the remote code of a checkpoint of `config` (a config dict): its configuration and
    modeling files; nothing for a model type that is no family's."""
    model_type = str(config.get("model_type"))
    configuration, modeling = family_modules(model_type)
    if "." in model_type or "/" in model_type or not module_path(modeling).is_file():
        return {}
    norm_types = checkpoint_norm_types(config)
    specs = [NORM_TYPES[kind] for kind in norm_types]
    layer_modules = [f"norms.{spec.layer_module}" for spec in specs]
    configuration_modules = (*CONFIGURATION_MODULES, configuration)
    modeling_modules = ordered_closure([*layer_modules, modeling], PACKAGE_ONLY_MODULES | set(configuration_modules))
    layer_classes = {name for spec in specs for name in (spec.layer_class, spec.position_norm_class) if name}
    modeling_statements = statements_of(modeling_modules, "")
    family_names = {
        name for statement in modeling_statements if statement.module == modeling for name in statement.binds
    }
    kept, modeling_reads = reachable(modeling_statements, family_names | layer_classes)
    configuration_statements = statements_of(configuration_modules, registry_source(norm_types, modeling))
    configuration_binds = {name for statement in configuration_statements for name in statement.binds}
    modeling_binds = {name for statement in kept for name in statement.binds}
    imported = sorted((modeling_reads - modeling_binds) & configuration_binds)
    config_names = {
        name for statement in configuration_statements if statement.module == configuration for name in statement.binds
    }
    config_kept, config_reads = reachable(configuration_statements, config_names | set(imported))
    guard = [statement for statement in config_kept if statement.module == CONFIGURATION_MODULES[0]]
    rest = [statement for statement in config_kept if statement.module != CONFIGURATION_MODULES[0]]
    import_line = f"from .{file_stem(configuration)} import {', '.join(imported)}  # runs the version guard first"
    return {
        f"{file_stem(configuration)}.py": header("The configuration", model_type, norm_types, configuration_modules)
        + render(guard, config_reads)  # before transformers is imported
        + "\n\n"
        + render(rest, config_reads),
        f"{file_stem(modeling)}.py": header("The model classes", model_type, norm_types, modeling_modules)
        + f"{import_line}\n\n"
        + render(kept, modeling_reads),
    }


def header(part: str, model_type: str, norm_types: list[str], modules: Iterable[str]) -> str:
    """A generated file's docstring and `__future__` import."""
    text = HEADER.format(part=part, model_type=model_type, norm_types=", ".join(norm_types), modules=", ".join(modules))
    docstring = textwrap.fill(text, width=116, break_long_words=False, break_on_hyphens=False)
    return f'"""{docstring}"""\n\nfrom __future__ import annotations\n\n'


def write_checkpoint_code(folder: str | Path, config: Mapping[str, Any]) -> list[str]:
    """Write the remote code of `config`'s checkpoint into `folder`; returns the names of the files written."""
    files = checkpoint_code(config)
    for name, text in files.items():
        (Path(folder) / name).write_text(text, encoding="utf-8")
    return sorted(files)
