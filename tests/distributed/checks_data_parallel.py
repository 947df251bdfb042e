"""Data parallelism over a model whose Linear layers run on our op: DDP and
FSDP2 (``fully_shard``), each checked against one process training the same
model on the whole batch (harness.compare_training)."""

from __future__ import annotations

from torch import nn
from torch.nn.parallel import DistributedDataParallel

from harness import Context, compare_training, make_model


def check_ddp(ctx: Context) -> None:
    model = make_model(ctx)
    ddp = DistributedDataParallel(model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    compare_training(ctx, "DDP", ddp, model)


def _fully_shard():
    """torch's fully_shard: public since 2.6, under _composable before."""
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard
    return fully_shard


def check_fsdp2(ctx: Context) -> None:
    try:
        fully_shard = _fully_shard()
    except ImportError:
        ctx.skip("FSDP2", "this torch has no fully_shard")
        return
    mesh = ctx.mesh()
    model = make_model(ctx)
    # One FSDP unit per Linear, then the root: parameters are gathered layer
    # by layer in forward, so each TF32Linear multiplies plain, whole tensors.
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    # Parameters and gradients are DTensors sharded on dim 0; gathered whole,
    # they agree across ranks by construction, so the comparison with one
    # process is the check that matters here.
    compare_training(ctx, "FSDP2", model, model, full=lambda t: t.full_tensor())
