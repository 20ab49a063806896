"""The processes one healing run spans: one (`hf-norms heal`), or one per device under a launcher that starts them
(`torchrun --nproc_per_node N -m hf_norms.conversion.heal ...`, `accelerate launch -m hf_norms.conversion.heal ...`),
which the `Trainer` then trains data-parallel (DDP: gradients averaged over gloo on CPUs, NCCL on GPUs).

`Processes.join(device)` joins the launcher's process group through accelerate's `PartialState`, the state the
`Trainer` uses too. Every process checks the inputs, loads the student and its own teacher and trains on its share of
the data; only the main process (rank 0) claims the work folder (`on_main`: the others wait until it has), evaluates
the healed model and writes the checkpoint and the report, which it hands to the others (`from_main`). Decisions that
must be the same everywhere, as when a time budget is spent, take the largest of every process's view (`largest`).
Without a launcher all of this is one process and no communication.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch

T = TypeVar("T")


class Processes:
    """This run's processes (see the module docstring); `count`, `rank` and `is_main` describe them."""

    def __init__(self, cpu: bool):
        from accelerate import PartialState

        self._state = lambda: PartialState(cpu=cpu)  # the Trainer resets and rebuilds the shared state: ask it anew
        state = self._state()
        self.count, self.rank, self.is_main = state.num_processes, state.process_index, state.is_main_process

    @classmethod
    def join(cls, device: torch.device) -> Processes:
        return cls(cpu=device.type == "cpu")

    def wait(self) -> None:
        """Return once every process has come here."""
        if self.count > 1:
            self._state().wait_for_everyone()

    def on_main(self, work: Callable[[], T]) -> T | None:
        """`work()` in the main process, after every process has come here and before any goes on; None elsewhere."""
        self.wait()
        result = work() if self.is_main else None
        self.wait()
        return result

    def from_main(self, value: T | None) -> T:
        """The main process's `value`, in every process."""
        if self.count == 1:
            return value
        from accelerate.utils import broadcast_object_list

        return broadcast_object_list([value], from_process=0)[0]

    def largest(self, value: float) -> float:
        """The largest `value` any process has."""
        if self.count == 1:
            return value
        tensor = torch.tensor([value], dtype=torch.float64, device=self._state().device)
        torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.MAX)
        return tensor.item()
