"""Tensor parallelism over swapped Linear layers, and the DTensor sharding
rules (pygpukit_torch/distributed.py) that make it run on our op.

check_tp: ``parallelize_module`` with ColwiseParallel / RowwiseParallel on the
TF32Linear layers; output and gradients equal to the unsharded model's, and,
read off the operators each rank ran rather than assumed, each rank's local
product ran on a pygpukit operator with the local shard's shapes, no torch
matmul beside.

check_rules: the matmul_tf32 rule on the shapes the TP model does not use,
and the linear_tf32 rule (bias and activation) on DTensors directly.
"""

from __future__ import annotations

from typing import List, Tuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import pygpukit_torch
from harness import BATCH_PER_RANK, SEQ, TF32_TOL, WIDTHS, Context, global_batch, make_model
from pygpukit_torch.testing import rel_error

# The torch operators a Linear would use if our op were bypassed.
TORCH_MATMULS = {"aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten.matmul", "aten.linear"}


def _plan():
    """Linear layers 0, 4 column-wise and 2, 6 row-wise (the last without
    bias): the usual MLP split, one all-reduce per pair."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return {"0": ColwiseParallel(), "2": RowwiseParallel(), "4": ColwiseParallel(), "6": RowwiseParallel()}


class LocalOps(TorchDispatchMode):
    """Records the operators run on this rank's local tensors: (name without
    overload, argument shapes). Calls on DTensors are handed back to DTensor
    (NotImplemented), which runs its local operators with this mode still
    active; sharding propagation's fake-tensor calls are left out.

    Used instead of torch.profiler, which corrupts the heap now and then
    under DTensor over gloo on torch 2.15's CPU build (seen in CI: SIGSEGV
    or "malloc_consolidate(): unaligned fastbin chunk", in a model without
    our op too)."""

    def __init__(self):
        super().__init__()
        self.ops: List[Tuple[str, List[List[int]]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from torch._subclasses.fake_tensor import FakeTensor
        from torch.distributed.tensor import DTensor

        if any(issubclass(t, DTensor) for t in types):
            return NotImplemented
        if not any(issubclass(t, FakeTensor) for t in types):
            name = func.overloadpacket._qualified_op_name.replace("::", ".")
            self.ops.append((name, [list(a.shape) for a in args if isinstance(a, torch.Tensor)]))
        return func(*args, **(kwargs or {}))


def _ran_on_shard(ops, x_shape, w_shape) -> bool:
    """Whether a pygpukit operator ran with `x_shape` as first operand and the
    local weight shard as second, transposed (matmul_tf32 gets weight.mT) or
    not (linear_tf32 gets weight)."""
    return any(name.startswith("pygpukit.") and len(shapes) >= 2 and shapes[0] == x_shape
               and sorted(shapes[1]) == sorted(w_shape) for name, shapes in ops)


def check_tp(ctx: Context) -> None:
    if "matmul_tf32" not in pygpukit_torch.distributed.REGISTERED_OPS:
        ctx.skip("TP", "no DTensor sharding rule: this torch lacks register_sharding (needs >= 2.5)")
        return
    if any(width % ctx.world for fan_in, fan_out, _ in WIDTHS for width in (fan_in, fan_out)):
        ctx.skip("TP", f"the model's widths do not split evenly over {ctx.world} ranks")
        return
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    reference = make_model(ctx)
    model = parallelize_module(make_model(ctx), ctx.mesh(), _plan())
    x, _ = global_batch(ctx, 0)  # the same on every rank: TP replicates the input
    with LocalOps() as local:
        out = model(x)
    ref_out = reference(x)
    ctx.expect_close("TP: output vs unsharded model", rel_error(out, ref_out))
    spread = ctx.spread_over_ranks(out)
    ctx.expect("TP: output identical on all ranks", spread == 0.0, f"max |diff| {spread:.1e}")

    missing = []
    for name, style in _plan().items():
        layer = model.get_submodule(name)
        # Column-wise layers see the whole input, row-wise ones its K shard.
        k = layer.in_features // (1 if isinstance(style, ColwiseParallel) else ctx.world)
        x_shape = [BATCH_PER_RANK * ctx.world, SEQ, k]
        w_shape = list(layer.weight.to_local().shape)
        if not _ran_on_shard(local.ops, x_shape, w_shape):
            missing.append(f"layer {name}: x{x_shape} with w{w_shape}")
    ctx.expect("TP: local products ran on pygpukit", not missing,
               "; ".join(missing) or f"all {len(_plan())} layers, on local shard shapes")
    bypass = sorted({name for name, _ in local.ops if name in TORCH_MATMULS})
    ctx.expect("TP: no torch matmul outside our op", not bypass, ", ".join(bypass) or "none")

    out.square().mean().backward()
    ref_out.square().mean().backward()
    grad_err = spread = 0.0
    for p, r in zip(model.parameters(), reference.parameters()):
        grad = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
        grad_err = max(grad_err, rel_error(grad, r.grad))
        spread = max(spread, ctx.spread_over_ranks(grad))
    ctx.expect_close("TP: gradients vs unsharded model", grad_err)
    ctx.expect("TP: gradients identical on all ranks", spread == 0.0, f"max |diff| {spread:.1e}")


def _check_rule_cases(ctx: Context, label: str, op, cases) -> None:
    """Runs `op` on DTensors for each case (name, [(tensor or None,
    placement)], further arguments, expected output placement, None meaning
    any but Partial) and checks the output placement and, gathered, its
    values against `op` on the whole tensors."""
    from torch.distributed.tensor import distribute_tensor

    mesh = ctx.mesh()
    for case, operands, extra, expected in cases:
        args = [distribute_tensor(t, mesh, [p]) if t is not None else None for t, p in operands]
        out = op(*args, *extra)
        err = rel_error(out.full_tensor(), op(*[t for t, _ in operands], *extra))
        placement = out.placements[0]
        placed = placement == expected if expected is not None else not placement.is_partial()
        ctx.expect(f"{label} rule: {case}", placed and err <= TF32_TOL,
                   f"output {placement} (expected {expected or 'not Partial'}), error {err:.1e}")


def check_rules(ctx: Context) -> None:
    """The matmul_tf32 rule beyond what the TP model uses (batch dimensions,
    1-D and broadcast operands), and the linear_tf32 rule."""
    from pygpukit_torch.distributed import REGISTERED_OPS

    if "linear_tf32" not in REGISTERED_OPS:
        ctx.skip("DTensor rules", "this torch lacks register_sharding (needs >= 2.5)")
        return
    linear = torch.ops.pygpukit.linear_tf32.default
    from torch.distributed.tensor import Partial, Replicate, Shard

    g = torch.Generator().manual_seed(7)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(ctx.device)

    R = Replicate()
    a3, b3, b2 = randn(8, 8, 16), randn(8, 16, 8), randn(16, 8)
    _check_rule_cases(ctx, "matmul_tf32", torch.ops.pygpukit.matmul_tf32.default, [
        ("batch sharded", [(a3, Shard(0)), (b3, Shard(0))], [], Shard(0)),
        ("M sharded", [(a3, Shard(1)), (b2, R)], [], Shard(1)),
        ("N sharded", [(a3, R), (b2, Shard(1))], [], Shard(2)),
        ("K sharded", [(a3, Shard(2)), (b3, Shard(1))], [], Partial()),
        ("1-D a, K sharded", [(randn(16), Shard(0)), (b2, Shard(0))], [], Partial()),
        ("broadcast batch", [(randn(2, 1, 8, 16), R), (b3, Shard(0))], [], Shard(1)),
    ])

    x, w, b = randn(BATCH_PER_RANK * ctx.world, SEQ, 32), randn(64, 32), randn(64)
    # Row-wise with relu must not come out Partial (relu of a partial sum is
    # wrong; DTensor has to gather first). It runs right after the same
    # placements without activation, so a sharding decision cached without
    # the activation would show here.
    _check_rule_cases(ctx, "linear_tf32", linear, [
        ("column-wise, bias, relu", [(x, R), (w, Shard(0)), (b, Shard(0))], ["relu"], Shard(2)),
        ("row-wise, no bias", [(x, Shard(2)), (w, Shard(1)), (None, None)], ["none"], Partial()),
        ("row-wise, bias", [(x, Shard(2)), (w, Shard(1)), (b, R)], ["none"], Partial()),
        ("row-wise, bias, relu", [(x, Shard(2)), (w, Shard(1)), (b, R)], ["relu"], None),
    ])
