"""`import hf_norms` registers with transformers without importing modeling code, and registers at a moment when no
module it reaches is half imported (`hf_norms.import_hooks.ImportWatcher`)."""

from __future__ import annotations

import json
import subprocess
import sys

REGISTERED_WITHOUT_MODELING_CODE = """
import json, sys
import hf_norms, torch, transformers
print(json.dumps(sorted(name for name in sys.modules if name.startswith(("transformers.models", "hf_norms.models")))))
from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification
from transformers import BertConfig
heads = [AutoModel._model_mapping[config].__name__ for config in (hf_norms.ViTNormConfig, hf_norms.BertNormConfig)]
heads.append(AutoModelForSequenceClassification._model_mapping[BertConfig].__name__)
auto = "transformers.models.auto.modeling_auto"  # the Auto classes themselves
models = sorted(name for name in sys.modules if ".models." in name and ".modeling_" in name and name != auto)
loaded = models + [name for name in ["transformers.modeling_utils"] if name in sys.modules]
print(json.dumps([AutoConfig.for_model("dinov2_norm").norm_type, heads, loaded]))
model = AutoModel.from_config(BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                         intermediate_size=32), norm_type="dyt")
print(json.dumps([type(model).__name__, isinstance(model, AutoModel._model_mapping[hf_norms.BertNormConfig])]))
"""


def test_the_auto_classes_hold_every_hf_norms_class_before_any_modeling_code_is_imported():
    """Importing transformers imports nothing of hf-norms or of transformers' models; the Auto mappings name every head
    while neither transformers' nor hf-norms' modeling modules are imported (`modeling_utils` alone costs seconds),
    and the first use imports the class."""
    result = subprocess.run([sys.executable, "-c", REGISTERED_WITHOUT_MODELING_CODE], capture_output=True, text=True,
                            check=True)  # fmt: skip
    imported, registered, used = (json.loads(line) for line in result.stdout.splitlines())
    # `import hf_norms, torch, transformers` costs what `import torch, transformers` costs: beside the import hooks, only
    # the version check (the standard library and packaging)
    assert imported == ["hf_norms.models", "hf_norms.models.version_guard"]
    assert registered == ["layernorm", ["ViTNormModel", "BertNormModel", "BertForSequenceClassification"], []]
    assert used == ["BertNormModel", True]


HALF_IMPORTED_PACKAGE = {
    "__init__.py": "from . import first\nVALUE = 42\n",
    "first.py": "from . import watched\n",
    "watched.py": "",
}
REGISTER_WHILE_THE_PACKAGE_IS_HALF_IMPORTED = """
import sys
sys.path.insert(0, {root!r})
from hf_norms.import_hooks import when_imported
def register():
    from halfpkg import VALUE  # fails while halfpkg/__init__.py is half executed
    print("registered", VALUE)
when_imported("halfpkg.watched", register)
import halfpkg
print("imported")
"""


def test_a_callback_waits_until_the_watched_package_has_finished_importing(tmp_path):
    """`halfpkg.watched` is first imported in the middle of `halfpkg/__init__.py`; its callback, which needs the whole
    package, runs once the package has finished (before, it ran at once and could not import `VALUE`)."""
    (tmp_path / "halfpkg").mkdir()
    for name, text in HALF_IMPORTED_PACKAGE.items():
        (tmp_path / "halfpkg" / name).write_text(text)
    script = REGISTER_WHILE_THE_PACKAGE_IS_HALF_IMPORTED.format(root=str(tmp_path))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.splitlines() == ["registered 42", "imported"], result.stderr
