"""DTensor sharding rules for the pygpukit operators.

Tensor parallelism (``torch.distributed.tensor.parallel``) hands our operators
DTensors: a swapped ``TF32Linear`` under ``ColwiseParallel`` multiplies a
replicated input by a weight sharded on its output features. DTensor runs an
operator shard by shard only if a sharding rule says which input placements
give which output placement; without one it raises "does not have a sharding
strategy registered". The rules here go through
``torch.distributed.tensor.experimental.register_sharding`` (torch >= 2.5), so
that each rank's local product runs on our kernel.

``pygpukit_torch/__init__.py`` imports this module when ``torch.distributed``
is available, which registers the rule of every operator this build has.
Reference: docs/multi_gpu.md.
"""

from __future__ import annotations

import logging
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

log = logging.getLogger(__name__)

# One strategy for one mesh dimension: (output placements, input placements);
# register_sharding expands a list of them over every dimension of the mesh.
# Input placements follow the operator's tensor arguments in order, None
# standing for an optional tensor that was left out.
Strategy = Tuple[list, list]


def _shard_if_present(spec, dim: int, size: int):
    """``Shard(dim)`` if the operand has dimension `dim` at the output's
    `size`; ``Replicate()`` if the dimension is absent (``dim < 0``) or
    broadcast from size 1, since every rank then needs all of it."""
    from torch.distributed.tensor import Replicate, Shard

    return Shard(dim) if dim >= 0 and spec.shape[dim] == size else Replicate()


def matmul_strategies(a, b, *, precision: Optional[str] = None) -> List[Strategy]:
    """List the placements under which ``matmul_tf32(a, b)`` runs shard by shard.

    The cases DTensor allows ``aten.bmm``: everything replicated; a batch
    dimension of the output sharded (each operand sharded on it where it
    has that dimension unbroadcast, replicated otherwise); M sharded (``a``
    on its rows, ``b`` replicated); N sharded (``a`` replicated, ``b`` on
    its columns: ``ColwiseParallel`` on a ``TF32Linear``); K sharded (both
    on the contracted dimension, the output a partial sum:
    ``RowwiseParallel``).

    Args:
        a, b: DTensor's specs of the operands (``.ndim``, ``.shape``).
        precision: the operator's precision argument (any value).

    Returns:
        ``(output placements, input placements)`` pairs for one mesh
        dimension, as ``register_sharding`` takes them.

    Example:
        >>> register_sharding_rule(torch.ops.pygpukit.matmul_tf32.default, matmul_strategies)
    """
    from torch.distributed.tensor import Partial, Replicate, Shard

    da, db = a.ndim, b.ndim
    a_batch, b_batch = max(da - 2, 0), max(db - 2, 0)
    batch = torch.broadcast_shapes(a.shape[:a_batch], b.shape[:b_batch])
    out_ndim = len(batch) + (da >= 2) + (db >= 2)

    strategies: List[Strategy] = [([Replicate()], [Replicate(), Replicate()])]
    for i, size in enumerate(batch):
        if size > 1:  # a size-1 dimension has nothing to split
            strategies.append(([Shard(i)], [_shard_if_present(a, i - (len(batch) - a_batch), size),
                                            _shard_if_present(b, i - (len(batch) - b_batch), size)]))
    if da >= 2:
        strategies.append(([Shard(len(batch))], [Shard(da - 2), Replicate()]))
    if db >= 2:
        strategies.append(([Shard(out_ndim - 1)], [Replicate(), Shard(db - 1)]))
    strategies.append(([Partial()], [Shard(da - 1), Shard(0 if db == 1 else db - 2)]))
    return strategies


def linear_strategies(x, weight, bias=None, activation: str = "none", *,
                      precision: Optional[str] = None) -> List[Strategy]:
    """List the placements under which ``linear_tf32(x, weight, bias, activation)`` runs shard by shard.

    Everything replicated; a leading dimension of ``x`` sharded, weight and
    bias replicated; column-wise: ``x`` replicated, weight and bias sharded
    on N, the output sharded on its last dimension (any activation: it is
    elementwise); row-wise: ``x`` sharded on K, the weight on its columns,
    the output a partial sum, only without activation (which does not
    commute with the sum). A bias is then ``Partial()`` too, so that the
    reduction adds it once: DTensor makes a replicated bias partial by
    dividing it by the mesh size on every rank, as its ``aten.addmm`` rule
    does for ``nn.Linear`` under ``RowwiseParallel`` (exact for power-of-two
    sizes, within an ulp otherwise).

    Args:
        x, weight, bias: DTensor's specs of the operands (bias may be None).
        activation: the operator's activation argument.
        precision: the operator's precision argument (any value).

    Returns:
        ``(output placements, input placements)`` pairs for one mesh
        dimension, None standing for an absent bias.

    Example:
        >>> register_sharding_rule(torch.ops.pygpukit.linear_tf32.default, linear_strategies)
    """
    from torch.distributed.tensor import Partial, Replicate, Shard

    def and_bias(placement) -> list:
        return [placement if bias is not None else None]

    dx = x.ndim
    strategies: List[Strategy] = [([Replicate()], [Replicate(), Replicate()] + and_bias(Replicate()))]
    for i in range(dx - 1):
        strategies.append(([Shard(i)], [Shard(i), Replicate()] + and_bias(Replicate())))
    strategies.append(([Shard(dx - 1)], [Replicate(), Shard(0)] + and_bias(Shard(0))))
    if activation == "none":
        strategies.append(([Partial()], [Shard(dx - 1), Shard(1)] + and_bias(Partial())))
    return strategies


def _is_tensor(arg_type) -> bool:
    if isinstance(arg_type, torch.OptionalType):
        arg_type = arg_type.getElementType()
    return isinstance(arg_type, torch.TensorType)


def _every_scalar_argument_static(op):
    """DTensor's RuntimeSchemaInfo naming all of `op`'s non-tensor arguments
    as static, i.e. part of the key under which DTensor caches a sharding
    decision. register_sharding's own guess counts integer arguments only, so
    a cached decision for ``activation="none"`` (row-wise, partial output)
    would be reused for ``activation="relu"``, where it is wrong."""
    from torch.distributed.tensor._op_schema import RuntimeSchemaInfo

    args = op._schema.arguments
    positional = [a for a in args if not a.kwarg_only]
    first_static = next((i for i, a in enumerate(positional) if not _is_tensor(a.type)), len(positional))
    static_kwargs = [a.name for a in args if a.kwarg_only and not _is_tensor(a.type)]
    return RuntimeSchemaInfo(first_static, static_kwargs or None, needs_pytree=True)


def register_sharding_rule(op, strategies: Callable[..., Sequence[Strategy]]) -> bool:
    """Make `strategies` the DTensor sharding rule of the OpOverload `op`.

    Args:
        op: the operator overload, e.g. ``torch.ops.pygpukit.matmul_tf32.default``.
        strategies: called with the operator's arguments, DTensor specs in
            place of tensors; returns ``(output, inputs)`` placement pairs.

    Returns:
        True if registered; False, registering nothing, on a torch without
        ``register_sharding`` (before 2.5).

    Example:
        >>> register_sharding_rule(torch.ops.pygpukit.matmul_tf32.default, matmul_strategies)
        True
    """
    try:
        from torch.distributed.tensor import DTensor
        from torch.distributed.tensor.experimental import register_sharding
    except ImportError:
        return False
    register_sharding(op)(strategies)
    DTensor._op_dispatcher.sharding_propagator.op_to_schema_info[op] = _every_scalar_argument_static(op)
    return True


# Every pygpukit operator with a sharding rule; an operator this build lacks
# is skipped.
RULES: Dict[str, Callable[..., Sequence[Strategy]]] = {
    "matmul_tf32": matmul_strategies,
    "linear_tf32": linear_strategies,
}


def register_sharding_rules() -> List[str]:
    """Register the rule of each operator in :data:`RULES` that this build has.

    Returns:
        The names of the operators registered (none on a torch without
        ``register_sharding``).

    Example:
        >>> register_sharding_rules()
        ['matmul_tf32', 'linear_tf32']
    """
    registered = [name for name, strategies in RULES.items()
                  if hasattr(torch.ops.pygpukit, name)
                  and register_sharding_rule(getattr(torch.ops.pygpukit, name).default, strategies)]
    log.debug("pygpukit: DTensor sharding rules for %s", registered)
    return registered


REGISTERED_OPS = register_sharding_rules()
