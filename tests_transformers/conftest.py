"""transformers' own model tests (`ModelTesterMixin`) run against the hf-norms classes.

`tests/test_modeling_common.py` ships in transformers' source distribution on PyPI; it is downloaded (pip) for the
installed release into `~/.cache/hf_norms/transformers-tests/<version>/`, nothing of it is kept in this repository.
Its two imports of test modules the distribution does not ship (the export and generation mixins, which test
exporters and `generate` that these encoder families do not use) get empty mixins. transformers' tests recognise a
model's task by its class name in the Auto mapping names; `register_mapping_names` adds the hf-norms names beside the
stock ones, as `AutoModel*.register` does for the classes themselves.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import transformers
from transformers.models.auto import modeling_auto

from hf_norms.models.family_registry import MODEL_CLASSES

CACHE = Path.home() / ".cache" / "hf_norms" / "transformers-tests" / transformers.__version__
STUBS = {
    "exporters/test_export.py": "class ExportTesterMixin:\n    pass\n",
    "generation/test_utils.py": "class GenerationTesterMixin:\n    pass\n",
}


def fetch_common_tests() -> Path:
    """The folder holding the package `tftests` with transformers' `test_modeling_common.py` of this release."""
    package = CACHE / "tftests"
    if (package / "test_modeling_common.py").is_file():
        return CACHE
    with tempfile.TemporaryDirectory() as download:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", "-d", download,
             f"transformers=={transformers.__version__}"],
            check=True,
        )  # fmt: skip
        archive = next(Path(download).glob("transformers-*.tar.gz"))
        with tarfile.open(archive) as sdist:
            member = next(m for m in sdist.getmembers() if m.name.endswith("/tests/test_modeling_common.py"))
            text = sdist.extractfile(member).read().decode()
    staging = CACHE.with_name(CACHE.name + ".partial") / "tftests"
    for relative, content in {"__init__.py": "", "test_modeling_common.py": text, **STUBS}.items():
        (staging / relative).parent.mkdir(parents=True, exist_ok=True)
        (staging / relative).with_name("__init__.py").touch()
        (staging / relative).write_text(content)
    staging.parent.rename(CACHE)
    return CACHE


def register_mapping_names() -> None:
    """Beside each stock class name in transformers' Auto mapping names, the hf-norms class of that task."""
    for mapping in vars(modeling_auto).values():
        if not (isinstance(mapping, dict) and type(mapping).__name__ == "OrderedDict"):
            continue
        for name, model_class in MODEL_CLASSES.items():
            stock_name = name.replace("Norm", "", 1)
            stock_type = model_class.config_class.stock_config_class().model_type
            stock = mapping.get(stock_type)
            if stock == stock_name or (isinstance(stock, tuple) and stock_name in stock):
                ours = mapping.get(model_class.config_class.model_type, ())
                ours = (ours,) if isinstance(ours, str) else ours
                if name not in ours:
                    mapping[model_class.config_class.model_type] = name if not ours else (*ours, name)


sys.path.insert(0, str(fetch_common_tests()))
register_mapping_names()
