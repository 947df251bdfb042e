"""A scope that routes a model's float32 matrix products to pygpukit's ops
without touching the model: ``with pygpukit_torch.enable():``.

Inside the block, calls of ``torch.matmul`` / ``@``, ``torch.mm``,
``torch.bmm``, ``torch.addmm``, ``torch.baddbmm`` (and their Tensor methods)
and ``torch.nn.functional.linear`` (so ``nn.Linear`` too) whose operands
are float32 strided tensors on an enabled device run
``pygpukit::matmul_tf32`` or ``pygpukit::linear_tf32``; everything else (other
dtypes, sparse or nested tensors, ``out=``, 1-D weights of ``F.linear``,
calls made from C++ such as ``torch.einsum``'s and
``scaled_dot_product_attention``'s internals) runs on torch unchanged. The
mechanism is a ``TorchFunctionMode`` (torch.overrides), which torch.compile
traces: compiled code called inside the block holds the ops in its graph.
"""

from __future__ import annotations

import collections
import contextlib
from dataclasses import dataclass, field
from typing import Iterator, Optional, Sequence

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from .ops import linear_tf32, matmul_tf32
from .precision import default_precision

_MATMULS = (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.mm, torch.Tensor.mm, torch.bmm,
            torch.Tensor.bmm)
_ADDMMS = (torch.addmm, torch.Tensor.addmm, torch.baddbmm, torch.Tensor.baddbmm)


@dataclass
class ScopeStats:
    """What a scope routed: ``taken`` products ran on pygpukit's ops;
    ``passed`` counts, by reason, those left to torch. Counted where the
    Python call is made: in eager code, per call; in torch.compile'd code,
    once per compilation (the traced calls)."""

    taken: int = 0
    passed: collections.Counter = field(default_factory=collections.Counter)

    def summary(self) -> str:
        passed = ", ".join(f"{n} {why}" for why, n in self.passed.most_common())
        return f"{self.taken} products on pygpukit" + (f"; left to torch: {passed}" if passed else "")


class _RouteMatmuls(TorchFunctionMode):
    def __init__(self, devices: Sequence[str], stats: ScopeStats):
        super().__init__()
        self.devices = tuple(devices)
        self.stats = stats

    def _why_not(self, tensors, kwargs) -> Optional[str]:
        if kwargs.get("out") is not None:
            return "out= given"
        for t in tensors:
            if not isinstance(t, torch.Tensor):
                return "an operand that is not a tensor"
            if t.dtype != torch.float32:
                return f"{t.dtype} operands"
            if t.layout != torch.strided or t.is_nested:
                return "non-strided operands"
            if t.device.type not in self.devices:
                return f"operands on {t.device.type}"
        return None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if any(func is f for f in _MATMULS) and len(args) == 2:
            why = self._why_not(args, kwargs)
            if why is None and (func is torch.bmm or func is torch.Tensor.bmm) and not (
                    args[0].dim() == 3 and args[1].dim() == 3):
                why = "bmm operands that are not 3-D"  # torch.bmm's own error then
            if why is None and (func is torch.mm or func is torch.Tensor.mm) and not (
                    args[0].dim() == 2 and args[1].dim() == 2):
                why = "mm operands that are not 2-D"
            if why is None:
                self.stats.taken += 1
                return matmul_tf32(args[0], args[1])
            self.stats.passed[why] += 1
        elif any(func is f for f in _ADDMMS) and len(args) == 3:
            why = self._why_not(args, kwargs)
            beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
            if why is None and set(kwargs) - {"beta", "alpha"}:
                why = "other keyword arguments"
            if why is None:
                self.stats.taken += 1
                product = matmul_tf32(args[1], args[2])
                if alpha != 1:
                    product = product * alpha
                # torch's rule: with beta = 0 the input is ignored (NaN included).
                return product if beta == 0 else torch.add(product, args[0], alpha=beta)
            self.stats.passed[why] += 1
        elif func is F.linear:
            x, weight = args[0], args[1] if len(args) > 1 else kwargs.get("weight")
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            tensors = [x, weight] + ([bias] if bias is not None else [])
            why = self._why_not(tensors, {})
            if why is None and (weight.dim() != 2 or (bias is not None and bias.dim() != 1)):
                why = "F.linear with a weight that is not 2-D or a bias that is not 1-D"
            if why is None:
                self.stats.taken += 1
                return linear_tf32(x, weight, bias)
            self.stats.passed[why] += 1
        return func(*args, **kwargs)


@contextlib.contextmanager
def enable(precision: Optional[str] = None, *, devices: Sequence[str] = ("cuda",)) -> Iterator[ScopeStats]:
    """Route the float32 matrix products made in this thread to pygpukit's ops.

    Args:
        precision: ``"tf32"``, ``"tf32x3"`` or ``"ieee"`` for the routed
            products, as a :func:`pygpukit_torch.default_precision` block
            (process-wide) around them; ``None`` keeps the default in force.
        devices: the device types whose products are routed (``"cpu"``
            routes CPU products to the CPU emulation, for tests).

    Returns:
        (as the ``with`` target) a :class:`ScopeStats` counting the products
        routed and, by reason, those left to torch.

    Raises:
        ValueError: an unknown precision.
        RuntimeError: entered inside code that torch.compile traces (enter
            it around the call of the compiled function).

    Nests and restores like any torch-function mode (thread-local); autograd
    runs through the ops' own backward. Products that torch makes from C++
    (``torch.einsum``, attention kernels) are not seen.

    Example:
        >>> with pygpukit_torch.enable() as stats:
        ...     y = model(x)
        >>> print(stats.summary())
    """
    if torch.compiler.is_compiling():
        raise RuntimeError("pygpukit_torch.enable: cannot be entered inside a function compiled by torch.compile; "
                           "enter the block around the call of the compiled function")
    if isinstance(devices, str):
        devices = (devices,)
    stats = ScopeStats()
    with default_precision(precision), _RouteMatmuls(devices, stats):
        yield stats
