"""What the checks under tests/distributed share: the process group on
whatever device there is, the model and data every check trains, and a
result table that all ranks agree on.

Device-agnostic by design: with GPUs each rank runs on ``cuda:LOCAL_RANK``
over NCCL; without (or with ``--device cpu``) on the CPU over gloo, where the
operator's CPU implementation emulates the same TF32 arithmetic, so the logic
is exercised on any machine.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Callable, List, Tuple

import torch
import torch.distributed as dist
from torch import nn

import pygpukit_torch
from pygpukit_torch.testing import rel_error

# NVLink multicast (NVLS) off: a program using it can put a shared host's GPUs
# out of service for a day or more. These are the variables the device
# machines' notes name; set here as defaults too, for launches that forget.
NVLINK_MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                        "NVSHMEM_DISABLE_NVLS": "1"}

# Both sides of every comparison use the same TF32 arithmetic on the same
# inputs; they differ only in summation order (a batch or K split across
# ranks) and in a few TF32 roundings flipped by that. A norm-wise relative
# error of 2e-3 (about four TF32 unit roundoffs, 2^-11 each) passes those and
# fails any real mistake (a missed average is off by a factor, a wrong shard
# by O(1)). Measured on CPU/gloo: at most 1.3e-7 with 2 and 4 ranks, but
# 6.3e-4-7.3e-4 for the DDP/FSDP2 gradients with 3, 5, 6 and 7 (2026-12-02;
# 1.9e-7 there with PYGPUKIT_PRECISION=ieee, so TF32 rounding, likely of
# gradients averaged over a world size that is not a power of two), too
# close to the 1e-3 used before.
TF32_TOL = 2e-3

# Model: widths divisible by 8, so tensor parallelism splits them evenly on
# up to 8 ranks; pairs of (column-wise, row-wise) Linear layers, the last one
# without bias, so that row-wise runs both with and without a bias.
WIDTHS = [(32, 64, True), (64, 32, True), (32, 64, True), (64, 16, False)]
BATCH_PER_RANK, SEQ = 2, 3


@dataclasses.dataclass
class Context:
    """One rank's view of the run, and the result rows collected so far."""

    rank: int
    world: int
    device: torch.device
    backend: str
    rows: List[Tuple[str, str, str]] = dataclasses.field(default_factory=list)

    def mesh(self):
        """A 1-D DeviceMesh over all ranks."""
        from torch.distributed.device_mesh import init_device_mesh

        return init_device_mesh(self.device.type, (self.world,))

    def max_over_ranks(self, value: float) -> float:
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t)

    def expect(self, name: str, ok: bool, detail: str) -> None:
        """Records a check that passes only if it passes on every rank."""
        ok = self.max_over_ranks(0.0 if ok else 1.0) == 0.0
        self.rows.append((name, "PASS" if ok else "FAIL", detail))

    def expect_close(self, name: str, err: float, limit: float = TF32_TOL) -> None:
        """Records ``err <= limit``, err taken as its maximum over the ranks."""
        err = self.max_over_ranks(err)
        self.rows.append((name, "PASS" if err <= limit else "FAIL", f"{err:.2e} (limit {limit:.0e})"))

    def skip(self, name: str, reason: str) -> None:
        self.rows.append((name, "SKIP", reason))

    def spread_over_ranks(self, t: torch.Tensor) -> float:
        """Largest elementwise difference between any rank's `t` and rank 0's
        (0.0 when every rank holds the very same values)."""
        t = t.detach().contiguous()
        gathered = [torch.empty_like(t) for _ in range(self.world)]
        dist.all_gather(gathered, t)
        return max(float((g - gathered[0]).abs().max()) for g in gathered) if t.numel() else 0.0


def setup(device: str = "auto") -> Context:
    """Joins the process group torchrun describes: NCCL with one GPU per rank
    when GPUs are there (`device` "auto" or "cuda"), gloo on the CPU else."""
    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if use_cuda:
        for name, value in NVLINK_MULTICAST_OFF.items():
            os.environ.setdefault(name, value)
        local_rank = int(os.environ["LOCAL_RANK"])
        if local_rank >= torch.cuda.device_count():
            sys.exit(f"rank with LOCAL_RANK {local_rank} has no GPU: {torch.cuda.device_count()} visible; "
                     f"start at most that many processes per node")
        dev = torch.device("cuda", local_rank)
        torch.cuda.set_device(dev)
        dist.init_process_group("nccl", device_id=dev)
    else:
        dev = torch.device("cpu")
        dist.init_process_group("gloo")
    return Context(dist.get_rank(), dist.get_world_size(), dev, dist.get_backend())


def make_model(ctx: Context) -> nn.Sequential:
    """The MLP every check trains, its Linear layers swapped onto our op;
    the same weights on every call and every rank."""
    torch.manual_seed(0)
    layers: List[nn.Module] = []
    for i, (fan_in, fan_out, bias) in enumerate(WIDTHS):
        layers += [nn.Linear(fan_in, fan_out, bias=bias)] + ([nn.GELU()] if i + 1 < len(WIDTHS) else [])
    model = pygpukit_torch.swap_linear_(nn.Sequential(*layers).to(ctx.device), policy=None)
    assert len(model.pygpukit_swap_report.swapped) == len(WIDTHS), model.pygpukit_swap_report
    return model


def global_batch(ctx: Context, step: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets of training step `step` for all ranks together,
    the same on every rank (drawn on the CPU from a per-step seed)."""
    g = torch.Generator().manual_seed(1000 + step)
    n = BATCH_PER_RANK * ctx.world
    x = torch.randn(n, SEQ, WIDTHS[0][0], generator=g)
    y = torch.randn(n, SEQ, WIDTHS[-1][1], generator=g)
    return x.to(ctx.device), y.to(ctx.device)


def local_part(ctx: Context, t: torch.Tensor) -> torch.Tensor:
    """This rank's share of a global batch (data parallelism)."""
    return t.chunk(ctx.world)[ctx.rank]


def compare_training(ctx: Context, label: str, wrapped: nn.Module, model: nn.Module,
                     full: Callable[[torch.Tensor], torch.Tensor] = lambda t: t, steps: int = 3) -> None:
    """Trains `wrapped` (a data-parallel wrapper of `model`, on this rank's
    part of each batch) and, beside it, a plain copy of the model on the
    whole batch, as one process would. Checks, after every step, that the
    gradients are identical on all ranks and close to the plain copy's, and
    at the end the parameters. `full` gathers a parameter or gradient whole
    from its shards (FSDP)."""
    reference = make_model(ctx)

    def sgd(m: nn.Module) -> torch.optim.Optimizer:
        # Momentum carries a wrong gradient of one step into the next ones.
        return torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)

    def step(m: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(m(x), y).backward()

    opt, ref_opt = sgd(wrapped), sgd(reference)
    spread = grad_err = 0.0
    for i in range(steps):
        x, y = global_batch(ctx, i)
        # Equal local batches: the average of the ranks' mean-loss gradients,
        # which DDP and FSDP compute, is the gradient of the whole batch's
        # mean loss.
        step(wrapped, opt, local_part(ctx, x), local_part(ctx, y))
        step(reference, ref_opt, x, y)
        for p, r in zip(model.parameters(), reference.parameters()):
            grad = full(p.grad)
            spread = max(spread, ctx.spread_over_ranks(grad))
            grad_err = max(grad_err, rel_error(grad, r.grad))
        opt.step()
        ref_opt.step()
    param_err = max(rel_error(full(p), r) for p, r in zip(model.parameters(), reference.parameters()))
    ctx.expect(f"{label}: gradients identical on all ranks", spread == 0.0, f"max |diff| {spread:.1e}")
    ctx.expect_close(f"{label}: gradients vs one process ({steps} steps)", grad_err)
    ctx.expect_close(f"{label}: parameters vs one process after the steps", param_err)


def print_table(ctx: Context, title: str) -> None:
    if ctx.rank != 0:
        return
    width = max(len(name) for name, _, _ in ctx.rows)
    print(f"\n{title}")
    for name, result, detail in ctx.rows:
        print(f"  {name:<{width}}  {result:<4}  {detail}")


def finish(ctx: Context) -> int:
    """Exit status of the run: 1 (with a message naming the failed checks)
    if any check failed, on every rank alike."""
    failed = [name for name, result, _ in ctx.rows if result == "FAIL"]
    dist.destroy_process_group()
    if failed:
        if ctx.rank == 0:
            print(f"FAILED: {len(failed)} check(s): " + "; ".join(failed), file=sys.stderr)
        return 1
    return 0

