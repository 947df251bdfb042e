"""The process-wide switch that routes float32 matrix products to pygpukit's
ops: :func:`enable_globally` / :func:`disable_globally`.

Where :func:`pygpukit_torch.enable` is a with block seen by one thread's
Python calls, this switch overrides torch's own ``aten::mm``, ``bmm``,
``addmm``, ``baddbmm``, ``addmm_`` and ``baddbmm_`` kernels for the enabled
device types (``torch.library``, dispatch key ``CUDA`` or ``CPU``), so it
holds in every thread and for every caller: ``torch.matmul``, ``F.linear``,
``torch.einsum`` and the products torch makes from C++ reach those
operators. Anything the ops do not take runs torch's own kernel through the
operator's ``out=`` overload, which is not overridden. Reference:
docs/linear_layers.md ("Every float32 product of the process").
"""

from __future__ import annotations

import threading
import warnings
from typing import Callable, Optional, Sequence

import torch

from . import _C
from ._settings import context_innermost
from .ops import PRECISIONS, _check_precision_is_str, _printable, linear_tf32, matmul_tf32
from .scope import (ScopeStats, _device_types, _real, _scaled_sum, _unbroadcast_input, _unmatched_product,
                    _unsupported_operands)

# The dispatch key that holds a device type's dense kernels: the level the
# switch overrides (below autograd, so torch's own backward formulas call the
# overridden kernels again for the gradients).
_DISPATCH_KEYS = {"cuda": "CUDA", "cpu": "CPU"}
_aten = torch.ops.aten

def _in_place(kind: str):
    """torch's own in-place addmm_ / baddbmm_: the product into a new tensor
    (torch's own errors for the operands), then the in-place rule's check
    and a copy into self."""
    out_of_place = getattr(_aten, kind).out

    def run(s, a, b, beta=1, alpha=1):
        result = out_of_place(s, a, b, beta=beta, alpha=alpha, out=s.new_empty(0))
        if result.shape != s.shape:
            raise RuntimeError(f"Bad in-place call: input tensor size {list(s.shape)} and output tensor size "
                               f"{list(result.shape)} should match")
        return s.copy_(result)

    return run


# torch's own kernel of each overridden operator, through its out= overload.
_TORCH = {
    "mm": lambda a, b: _aten.mm.out(a, b, out=a.new_empty(0)),
    "bmm": lambda a, b: _aten.bmm.out(a, b, out=a.new_empty(0)),
    "addmm": lambda s, a, b, beta=1, alpha=1: _aten.addmm.out(s, a, b, beta=beta, alpha=alpha, out=a.new_empty(0)),
    "baddbmm": lambda s, a, b, beta=1, alpha=1: _aten.baddbmm.out(s, a, b, beta=beta, alpha=alpha,
                                                                   out=a.new_empty(0)),
    "addmm_": _in_place("addmm"),
    "baddbmm_": _in_place("baddbmm"),
}


class _Router:
    """What the switch does while it is on: the settings and the counts."""

    def __init__(self, precision: Optional[str], devices: Sequence[str], stats: ScopeStats):
        self.precision = precision
        self.devices = frozenset(devices)
        self.stats = stats
        self.count_lock = threading.Lock()

    def _precision(self) -> Optional[str]:
        # None: the operators' default, with this thread's innermost
        # default_precision block recorded so that backward uses it too.
        return self.precision or context_innermost("precision")

    def count(self, why: Optional[str]) -> None:
        with self.count_lock:
            if why is None:
                self.stats.taken += 1
            else:
                self.stats.passed[why] += 1

    # Each returns the product, or a string saying why torch computes it.
    def mm(self, a, b):
        why = _unsupported_operands((a, b)) or _unmatched_product("mm", a, b, 2)
        return why or matmul_tf32(a, b, precision=self._precision())

    def bmm(self, a, b):
        why = _unsupported_operands((a, b)) or _unmatched_product("bmm", a, b, 3)
        return why or matmul_tf32(a, b, precision=self._precision())

    def addmm(self, input, a, b, beta=1, alpha=1):
        why, beta, alpha = self._add_product_taken("addmm", input, a, b, beta, alpha, 2)
        if why is not None:
            return why
        if beta == 1 and alpha == 1 and input.shape in ((b.shape[1],), (1, b.shape[1])):
            # torch.nn.functional.linear's own call: the bias in the epilogue.
            return linear_tf32(a, b.t(), input.reshape(-1), precision=self._precision())
        return _scaled_sum(input, matmul_tf32(a, b, precision=self._precision()), beta, alpha)

    def baddbmm(self, input, a, b, beta=1, alpha=1):
        why, beta, alpha = self._add_product_taken("baddbmm", input, a, b, beta, alpha, 3)
        if why is not None:
            return why
        return _scaled_sum(input, matmul_tf32(a, b, precision=self._precision()), beta, alpha)

    def addmm_(self, input, a, b, beta=1, alpha=1):
        return self._in_place("addmm", input, a, b, beta, alpha, 2)

    def baddbmm_(self, input, a, b, beta=1, alpha=1):
        return self._in_place("baddbmm", input, a, b, beta, alpha, 3)

    def _in_place(self, kind, input, a, b, beta, alpha, dims):
        why, beta, alpha = self._add_product_taken(f"{kind}_", input, a, b, beta, alpha, dims)
        if why is None and input.shape != (*a.shape[:-1], b.shape[-1]):
            why = f"an {kind}_ input of another shape than the product"
        if why is not None:
            return why
        product = matmul_tf32(a, b, precision=self._precision())
        if beta == 0:  # the input's values, NaN included, are ignored
            return input.copy_(product.mul_(alpha) if alpha != 1 else product)
        return (input.mul_(beta) if beta != 1 else input).add_(product, alpha=alpha)

    @staticmethod
    def _add_product_taken(kind, input, a, b, beta, alpha, dims):
        """(why not, beta, alpha as floats): torch keeps a product whose
        scalars are not finite real numbers, whose alpha is 0 (torch then
        reads neither operand) or whose K is 0 (torch keeps the input's
        signed zeros)."""
        why = _unsupported_operands((input, a, b)) or _unmatched_product(kind, a, b, dims)
        real_beta, real_alpha = _real(beta), _real(alpha)
        if why is None and (real_beta is None or real_alpha is None or real_alpha == 0.0):
            why = f"{kind} with alpha = 0, or alpha or beta not a finite real number"
        if why is None and a.shape[-1] == 0:
            why = f"{kind} with K = 0"
        return why or _unbroadcast_input(kind, input, a, b, dims), real_beta, real_alpha


# The router in force, None while the switch is off. The kernels read it
# once per call: a switch turned off or replaced meanwhile changes the next
# call, not one in flight.
_router: Optional[_Router] = None
# Set while this thread runs an op for the switch: products the ops make
# themselves (the CPU emulation's float64 product) go to torch uncounted.
_inside = threading.local()
_lock = threading.Lock()
# The registrations, made for a dispatch key the first time it is enabled
# and kept for the life of the process: torch's dispatcher cannot drop a
# Python kernel safely while other threads may be calling it. _registered
# holds (operator, key) pairs.
_library: Optional[torch.library.Library] = None
_registered = set()


def _kernel(name: str) -> Callable:
    """The function registered for aten::`name`."""
    torch_kernel = _TORCH[name]
    route = getattr(_Router, name)

    def kernel(*args, **kwargs):
        router = _router
        if router is None or getattr(_inside, "op", False) or args[0].device.type not in router.devices:
            return torch_kernel(*args, **kwargs)
        _inside.op = True
        try:
            result = route(router, *args, **kwargs)
        finally:
            _inside.op = False
        router.count(result if isinstance(result, str) else None)
        return torch_kernel(*args, **kwargs) if isinstance(result, str) else result

    return kernel


def _register(devices: Sequence[str]) -> None:
    """Registers the kernels for each device type's key where not yet
    registered (under _lock). A kernel registered while the switch is off
    for its device type passes every call to torch."""
    global _library
    if _library is None:
        _library = torch.library.Library("aten", "IMPL")
    for key in (_DISPATCH_KEYS[device] for device in devices):
        for name in _TORCH:
            if (name, key) in _registered:
                continue
            with warnings.catch_warnings():
                # torch warns once that a kernel is being overridden: that is the point.
                warnings.filterwarnings("ignore", message=".*[Oo]verrid")
                try:
                    _library.impl(name, _kernel(name), key)
                except RuntimeError as error:
                    raise RuntimeError(f"enable_globally: cannot override aten::{name} for the {key} key, so "
                                       f"the switch is left as it was: {error}") from None
            _registered.add((name, key))


def enable_globally(precision: Optional[str] = None, *, devices: Sequence[str] = ("cuda",)) -> ScopeStats:
    """Route every float32 matrix product of the process to pygpukit's ops, until :func:`disable_globally`.

    Overrides torch's ``aten::mm``, ``bmm``, ``addmm``, ``baddbmm``,
    ``addmm_`` and ``baddbmm_`` kernels for the enabled device types, so
    products made in any thread, from Python or from C++ (``torch.matmul``,
    ``@``, ``F.linear``, ``torch.einsum``, attention written with matmuls),
    run ``matmul_tf32`` / ``linear_tf32``; other dtypes, ``out=`` calls and
    shapes torch rejects run torch's own kernel. Code compiled by
    torch.compile's default backend keeps Inductor's products: use
    :func:`pygpukit_torch.enable` around compiled calls. Calling it again
    replaces the settings; once a device type has been enabled, its
    products pass through a thin Python layer for the rest of the process
    (docs/linear_layers.md).

    Args:
        precision: ``"tf32"``, ``"tf32x3"``, ``"fp32"`` or ``"ieee"`` for
            every routed product; ``None`` uses the operators' default at
            each call (:func:`pygpukit_torch.default_precision`).
        devices: the device types whose products are routed: ``"cuda"``
            and/or ``"cpu"`` (the CPU emulation, for tests).

    Returns:
        A :class:`ScopeStats` counting, from now until the switch is
        disabled or replaced, the products routed and those left to torch.

    Raises:
        ValueError: an unknown precision, devices other than cuda/cpu, or
            cuda in a build without the CUDA kernels.
        TypeError: a precision that is neither a string nor None.
        RuntimeError: another library already overrides one of the operators
            from Python for one of these device types (the switch is then
            left as it was).

    Example:
        >>> stats = pygpukit_torch.enable_globally()
        >>> y = model(x)                      # every float32 product on the ops
        >>> pygpukit_torch.disable_globally()
        >>> print(stats.summary())
    """
    global _router
    if precision is not None:
        _check_precision_is_str("enable_globally", precision)
        if precision not in PRECISIONS:
            raise ValueError(f"enable_globally: unknown precision '{_printable(precision)}'; expected one of "
                             f"{', '.join(map(repr, PRECISIONS))}")
    types = _device_types(devices, caller="enable_globally")
    unsupported = sorted(set(types) - set(_DISPATCH_KEYS))
    if unsupported:
        raise ValueError(f"enable_globally: devices must be 'cuda' and/or 'cpu' (pygpukit's ops run there), "
                         f"got {', '.join(map(repr, unsupported))}")
    if "cuda" in types and not _C.built_with_cuda:
        raise ValueError("enable_globally: this build of pygpukit_torch has no CUDA kernels (built without nvcc "
                         "or with PYGPUKIT_BUILD_CUDA=0); enable devices='cpu' only, or rebuild with CUDA")
    stats = ScopeStats()
    with _lock:
        _register(dict.fromkeys(types))
        _router = _Router(precision, types, stats)
    return stats


def disable_globally() -> None:
    """Give the products back to torch's own kernels; nothing happens if the switch is off.

    Products already running finish on the ops. CUDA graphs captured while
    the switch was on keep the kernels they captured.

    Example:
        >>> pygpukit_torch.enable_globally()
        >>> pygpukit_torch.disable_globally()
    """
    global _router
    with _lock:
        _router = None


def enabled_globally() -> bool:
    """Return whether :func:`enable_globally` is in force.

    Example:
        >>> pygpukit_torch.enabled_globally()
        False
    """
    return _router is not None
