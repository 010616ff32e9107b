"""SyncBatchNorm: batch normalisation over the global batch of all ranks
(horovod.torch.sync_batch_norm; docs/python.md, "SyncBatchNorm").

In training mode with more than one rank (and, as in Horovod, in eval mode
without running statistics), the per-channel mean and variance
are those of the concatenation of every rank's batch (ranks may hold
different numbers of samples), the running statistics are updated with the
global mean and unbiased variance as torch.nn.BatchNorm*d does, and the
backward pass sums its per-channel reductions over the ranks, so that the
input gradient is the one of the global batch. In eval mode with running
statistics, or with one rank, it is torch's BatchNorm. The statistics travel as CPU tensors."""
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from hvdcomm.torch import mpi_ops


def _stat_dtype(dtype):
    # float64 stays float64; half types are accumulated in float32.
    return torch.float64 if dtype == torch.float64 else torch.float32


def _channel_view(t, dim):
    """A [C] tensor shaped to broadcast over an input of `dim` dimensions."""
    return t.reshape([1, -1] + [1] * (dim - 2))


class _SyncBatchNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum):
        dims = [0] + list(range(2, input.dim()))  # every dimension but the channels
        x = input.to(_stat_dtype(input.dtype))
        count = input.numel() // input.size(1)
        if count > 0:
            mean = x.mean(dims)
            m2 = (x - _channel_view(mean, x.dim())).pow(2).sum(dims)
        else:
            mean = torch.zeros(input.size(1), dtype=x.dtype, device=x.device)
            m2 = torch.zeros_like(mean)
        # One row per rank: [count, mean (C), sum of squared deviations (C)];
        # combined as Chan et al.'s parallel variance, exact for unequal counts.
        row = torch.cat([torch.tensor([float(count)], dtype=x.dtype, device=x.device), mean, m2])
        rows = mpi_ops.allgather(row.unsqueeze(0).cpu()).to(device=x.device, dtype=x.dtype)
        counts, means, m2s = rows[:, 0], rows[:, 1:1 + mean.numel()], rows[:, 1 + mean.numel():]
        total = counts.sum()
        n = int(round(total.item()))
        if n <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                             f"{list(input.shape)} on this rank and {n} value(s) per channel over all ranks")
        g_mean = (counts.unsqueeze(1) * means).sum(0) / total
        g_m2 = (m2s + counts.unsqueeze(1) * (means - g_mean).pow(2)).sum(0)
        g_var = g_m2 / total  # biased: what normalises the batch
        invstd = torch.rsqrt(g_var + eps)

        if running_mean is not None:
            running_mean.mul_(1.0 - momentum).add_(g_mean.to(running_mean.dtype), alpha=momentum)
        if running_var is not None:
            unbiased = g_m2 / (total - 1)
            running_var.mul_(1.0 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)

        xhat = (x - _channel_view(g_mean, x.dim())) * _channel_view(invstd, x.dim())
        out = xhat
        if weight is not None:
            out = out * _channel_view(weight.to(x.dtype), x.dim())
        if bias is not None:
            out = out + _channel_view(bias.to(x.dtype), x.dim())
        ctx.save_for_backward(xhat, invstd, weight)
        ctx.has_bias = bias is not None
        ctx.total = total
        return out.to(input.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        xhat, invstd, weight = ctx.saved_tensors
        dims = [0] + list(range(2, xhat.dim()))
        dy = grad_output.to(xhat.dtype)
        sum_dy = dy.sum(dims)
        sum_dy_xhat = (dy * xhat).sum(dims)
        # The local sums are this rank's parameter gradients (summed over the
        # ranks by DistributedOptimizer); the input gradient needs the global ones.
        both = mpi_ops.allreduce(torch.cat([sum_dy, sum_dy_xhat]).cpu(), op=mpi_ops.Sum)
        both = both.to(device=dy.device, dtype=dy.dtype)
        c = sum_dy.numel()
        g_mean_dy = _channel_view(both[:c] / ctx.total, dy.dim())
        g_mean_dy_xhat = _channel_view(both[c:] / ctx.total, dy.dim())
        scale = invstd if weight is None else invstd * weight.to(dy.dtype)
        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_input = ((dy - g_mean_dy - xhat * g_mean_dy_xhat) * _channel_view(scale, dy.dim()))
            grad_input = grad_input.to(grad_output.dtype)
        if weight is not None and ctx.needs_input_grad[1]:
            grad_weight = sum_dy_xhat.to(weight.dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = sum_dy.to(weight.dtype if weight is not None else grad_output.dtype)
        return grad_input, grad_weight, grad_bias, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """torch.nn.BatchNorm*d whose training-mode statistics are those of the
    global batch (every rank's samples); Horovod's arguments and behaviour."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        # As Horovod: the global batch's statistics in training mode, and in
        # eval mode too when there are no running statistics to use.
        batch_stats = self.training or not self.track_running_stats
        if not batch_stats or mpi_ops.size() == 1 or input.size(1) != self.num_features:
            # torch's BatchNorm: eval mode with running statistics, one rank,
            # or torch's own error for a wrong number of features.
            return super().forward(input)
        # momentum and num_batches_tracked exactly as _BatchNorm.forward.
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        return _SyncBatchNormFn.apply(input, self.weight, self.bias, self.running_mean, self.running_var,
                                      self.eps, factor)
