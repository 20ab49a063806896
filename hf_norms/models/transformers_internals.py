"""The names hf-norms uses from transformers outside its public API, all here so that a release that moves one
breaks one import: the compatibility set (`tests/compatibility`) exercises each on the oldest and the newest supported
release.

- `LoadStateDictInfo`, `log_state_dict_report`: transformers' load report, which a LayerNorm checkpoint loaded into
  another norm_type logs without the parameters hf-norms set on purpose (`layernorm_loading`).
- `remove_tied_weights_from_state_dict`: what `save_pretrained` leaves out of a state dict, for the sharded
  conversion, which writes shards itself (`hf_norms.conversion.sharded`).

Package-only: a checkpoint's remote code leaves it out, so it never imports transformers' private modules.
"""

from ..version_guard import SUPPORTED_TRANSFORMERS  # noqa: F401

# isort: split

from transformers.modeling_utils import remove_tied_weights_from_state_dict
from transformers.utils.loading_report import LoadStateDictInfo, log_state_dict_report

__all__ = ["LoadStateDictInfo", "log_state_dict_report", "remove_tied_weights_from_state_dict"]
