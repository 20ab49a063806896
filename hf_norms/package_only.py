"""`@package_only`: marks a function, method or class that only the installed hf-norms package runs (loading a
LayerNorm checkpoint into another norm_type, writing and publishing a checkpoint, the card's facts), which
`checkpoint_code` leaves out of the remote code it writes beside each checkpoint. The decorator changes nothing.
"""

from __future__ import annotations

from typing import TypeVar

Definition = TypeVar("Definition")


def package_only(definition: Definition) -> Definition:
    """`definition` itself: the mark is read from the source by `checkpoint_code`."""
    return definition
