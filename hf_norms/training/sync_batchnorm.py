"""Batch statistics shared by all processes of a distributed run, on CPU (gloo) as well as on GPU.

SepNorm's official prefix norm is a `BatchNorm1d` over the batch. Under data parallelism each process sees only its
share of the batch, so its statistics (and running statistics) would differ from one process to the next: the model
needs synchronised batch norm. On GPU that is `torch.nn.SyncBatchNorm`. On CPU torch refuses it twice: its forward
raises "SyncBatchNorm expected input tensor to be on GPU", and `DistributedDataParallel` raises "SyncBatchNorm layers
only work with GPU modules" for any `nn.SyncBatchNorm` (subclasses included). So `CPUSyncBatchNorm` is a plain
`_BatchNorm` that all-reduces the per-channel sums, then the sums of squared deviations, through a differentiable
all-reduce, over any backend that can all-reduce CPU tensors (gloo). `convert_sync_batchnorm` picks torch's layer for
GPU models and this one for CPU models.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


class _SumOverProcesses(torch.autograd.Function):
    """`all_reduce(SUM)` of a tensor, whose gradient is the `all_reduce(SUM)` of the incoming gradients.

    Every process gets `y = sum_r x_r`; for the summed loss `L = sum_r L_r`, `dL/dx_s = sum_r dL_r/dy`, which is what
    the backward all-reduce hands each process.
    """

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
        ctx.group = group
        total = tensor.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(total, group=group)
        return total

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor) -> tuple[torch.Tensor, None]:
        total = grad_output.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(total, group=ctx.group)
        return total, None


class CPUSyncBatchNorm(nn.modules.batchnorm._BatchNorm):
    """Batch norm whose training statistics span all processes of a process group, for CPU tensors (gloo).

    In training, with a process group of more than one process and a CPU input `x` of shape `[batch, C, *]`, each
    channel is normalised with the statistics of the whole global batch (all processes, `n` values per channel):

        mean = sum_r sum x_r / n,    var = sum_r sum (x_r - mean)^2 / n    (two all-reduces, both differentiable)
        y    = (x - mean) / sqrt(var + eps) * weight + bias

    and the running statistics move towards `mean` and the unbiased `var * n / (n - 1)`, identically on every process.
    Otherwise (evaluation, a single process) it is `BatchNorm`. Parameter and buffer names are BatchNorm's, so
    checkpoints are unaffected. Input: `[batch, C]` or `[batch, C, *]`.
    """

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        process_group: dist.ProcessGroup | None = None,
    ):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_group = process_group

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input [batch, channels, *], got {input.dim()}D")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        group = self.process_group
        if group is None and dist.is_available() and dist.is_initialized():
            group = dist.group.WORLD
        if not self.training or group is None or dist.get_world_size(group) == 1:
            return super().forward(input)
        self._check_input_dim(input)
        reduce_dims = [0, *range(2, input.dim())]
        channel_shape = [1, -1] + [1] * (input.dim() - 2)

        local_count = torch.tensor([input.numel() // input.shape[1]], dtype=input.dtype)
        totals = _SumOverProcesses.apply(torch.cat([input.sum(reduce_dims), local_count]), group)
        count = totals[-1]
        if count.item() < 2:
            raise ValueError(
                f"Expected more than 1 value per channel when training, got {int(count.item())} over all processes: "
                "use a larger batch."
            )
        mean = totals[:-1] / count
        centred = input - mean.view(channel_shape)
        var = _SumOverProcesses.apply((centred * centred).sum(reduce_dims), group) / count

        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                factor = 1.0 / self.num_batches_tracked.item() if self.momentum is None else self.momentum
                self.running_mean.mul_(1 - factor).add_(mean.detach(), alpha=factor)
                self.running_var.mul_(1 - factor).add_(var.detach() * count / (count - 1), alpha=factor)

        output = centred * torch.rsqrt(var + self.eps).view(channel_shape)
        if self.affine:
            output = output * self.weight.view(channel_shape) + self.bias.view(channel_shape)
        return output


def convert_sync_batchnorm(
    module: nn.Module,
    device_type: str = "cpu",
    process_group: dist.ProcessGroup | None = None,
) -> nn.Module:
    """Replace every BatchNorm in `module` (SepNorm's prefix norm) by a synchronised one sharing its tensors.

    `device_type` is where the model will train: `cpu` gives `CPUSyncBatchNorm`, any other device
    `torch.nn.SyncBatchNorm` (through its own `convert_sync_batchnorm`). Parameters and buffers are moved over (the same
    tensor objects), so checkpoint keys are unaffected. Returns the converted module (a new object only when `module`
    itself is a BatchNorm).
    """
    if device_type != "cpu":
        return nn.SyncBatchNorm.convert_sync_batchnorm(module, process_group)
    if isinstance(module, nn.modules.batchnorm._BatchNorm) and type(module) is not CPUSyncBatchNorm:
        converted = CPUSyncBatchNorm(
            module.num_features,
            module.eps,
            module.momentum,
            module.affine,
            module.track_running_stats,
            process_group,
        )
        if module.affine:
            converted.weight, converted.bias = module.weight, module.bias
        if module.track_running_stats:
            converted.running_mean, converted.running_var = module.running_mean, module.running_var
            converted.num_batches_tracked = module.num_batches_tracked
        converted.train(module.training)
        return converted
    for name, child in module.named_children():
        module.add_module(name, convert_sync_batchnorm(child, device_type, process_group))
    return module
