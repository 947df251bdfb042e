"""The process-wide switch that routes float32 matrix products to pygpukit's
ops: :func:`enable_globally` / :func:`disable_globally`.

Where :func:`pygpukit_torch.enable` is a with block seen by one thread's
Python calls, this switch overrides torch's own ``aten::mm``, ``aten::bmm``,
``aten::addmm`` and ``aten::baddbmm`` kernels for the enabled device types
(``torch.library``, dispatch key ``CUDA`` or ``CPU``), so it holds in every
thread and for every caller: ``torch.matmul``, ``F.linear``, ``torch.einsum``
and the products torch makes from C++ reach those four operators. Anything
the ops do not take runs torch's own kernel through the operator's ``out=``
overload, which the switch leaves alone. Reference: docs/linear_layers.md
("Every float32 product of the process").
"""

from __future__ import annotations

import threading
import warnings
from typing import Optional, Sequence

import torch

from ._settings import context_innermost
from .ops import PRECISIONS, _check_precision_is_str, _printable, linear_tf32, matmul_tf32
from .scope import ScopeStats, _device_types

# The dispatch key that holds a device type's dense kernels: the level the
# switch overrides (below autograd, so torch's own backward formulas call the
# overridden kernels again for the gradients).
_DISPATCH_KEYS = {"cuda": "CUDA", "cpu": "CPU"}

_lock = threading.Lock()
_library: Optional[torch.library.Library] = None  # the registrations while enabled


def _operands_taken(*tensors: torch.Tensor) -> Optional[str]:
    """Why the ops do not take these operands, or None if they do."""
    for t in tensors:
        if t.dtype != torch.float32:
            return f"{t.dtype} operands"
        if t.layout != torch.strided:
            return "non-strided operands"
    return None


def _matching(a: torch.Tensor, b: torch.Tensor, dims: int) -> bool:
    """Whether a @ b is a product of `dims`-D operands that the aten operator takes."""
    return (a.dim() == dims and b.dim() == dims and a.shape[-1] == b.shape[-2] and
            (dims == 2 or a.shape[0] == b.shape[0]))


class _Router:
    """The kernels registered for the overridden operators; counts into `stats`."""

    def __init__(self, precision: Optional[str], stats: ScopeStats):
        self.precision = precision
        self.stats = stats
        self.count_lock = threading.Lock()
        # Set while this thread runs one of the ops: products they make
        # themselves (the CPU emulation's float64 product) are torch's.
        self.inside = threading.local()

    def _precision(self) -> Optional[str]:
        # None: the operators' default, with this thread's innermost
        # default_precision block recorded so that backward uses it too.
        return self.precision or context_innermost("precision")

    def _run(self, op, *args, **kwargs):
        self.inside.op = True
        try:
            return op(*args, **kwargs)
        finally:
            self.inside.op = False

    def _count(self, why: Optional[str]) -> Optional[str]:
        """`why` (None: the ops take the product), counted unless an op made the call."""
        if getattr(self.inside, "op", False):
            return "made inside a pygpukit op"
        with self.count_lock:
            if why is None:
                self.stats.taken += 1
            else:
                self.stats.passed[why] += 1
        return why

    def mm(self, a, b):
        why = _operands_taken(a, b) or (None if _matching(a, b, 2) else "mm operands that are not 2-D and matching")
        if self._count(why) is not None:
            return torch.ops.aten.mm.out(a, b, out=a.new_empty(0))
        return self._run(matmul_tf32, a, b, precision=self._precision())

    def bmm(self, a, b):
        why = _operands_taken(a, b) or (None if _matching(a, b, 3) else "bmm operands that are not 3-D and matching")
        if self._count(why) is not None:
            return torch.ops.aten.bmm.out(a, b, out=a.new_empty(0))
        return self._run(matmul_tf32, a, b, precision=self._precision())

    def addmm(self, input, a, b, *, beta=1, alpha=1):
        why = self._add_product_taken("addmm", input, a, b, 2)
        if self._count(why) is not None:
            return torch.ops.aten.addmm.out(input, a, b, beta=beta, alpha=alpha, out=a.new_empty(0))
        if beta == 1 and alpha == 1 and input.shape in ((b.shape[1],), (1, b.shape[1])):
            # torch.nn.functional.linear's own call: the bias in the epilogue.
            return self._run(linear_tf32, a, b.t(), input.reshape(-1), precision=self._precision())
        return self._add_product(input, self._run(matmul_tf32, a, b, precision=self._precision()), beta, alpha)

    def baddbmm(self, input, a, b, *, beta=1, alpha=1):
        why = self._add_product_taken("baddbmm", input, a, b, 3)
        if self._count(why) is not None:
            return torch.ops.aten.baddbmm.out(input, a, b, beta=beta, alpha=alpha, out=a.new_empty(0))
        return self._add_product(input, self._run(matmul_tf32, a, b, precision=self._precision()), beta, alpha)

    @staticmethod
    def _add_product_taken(kind, input, a, b, dims) -> Optional[str]:
        why = _operands_taken(input, a, b)
        if why is None and not _matching(a, b, dims):
            why = f"{kind} operands that are not {dims}-D and matching"
        if why is None:
            shape = (*a.shape[:-1], b.shape[-1])
            try:
                broadcasts = input.dim() <= dims and torch.broadcast_shapes(input.shape, shape) == torch.Size(shape)
            except RuntimeError:
                broadcasts = False
            if not broadcasts:
                why = f"an {kind} input that does not broadcast to the product"
        return why

    @staticmethod
    def _add_product(input, product, beta, alpha):
        if alpha != 1:
            product.mul_(alpha)
        # torch's rule: with beta = 0 the input is ignored (NaN included).
        return product if beta == 0 else product.add_(input, alpha=beta)


def enable_globally(precision: Optional[str] = None, *, devices: Sequence[str] = ("cuda",)) -> ScopeStats:
    """Route every float32 matrix product of the process to pygpukit's ops, until :func:`disable_globally`.

    Overrides torch's ``aten::mm``, ``bmm``, ``addmm`` and ``baddbmm``
    kernels for the enabled device types, so products made in any thread,
    from Python or from C++ (``torch.matmul``, ``@``, ``F.linear``,
    ``torch.einsum``, attention written with matmuls), run ``matmul_tf32`` /
    ``linear_tf32``; other dtypes, ``out=`` calls and shapes torch rejects
    run torch's own kernel. Code compiled by torch.compile's default backend
    keeps Inductor's products: use :func:`pygpukit_torch.enable` around
    compiled calls. Calling it again replaces the settings.

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
        ValueError: an unknown precision, or devices other than cuda/cpu.
        TypeError: a precision that is neither a string nor None.
        RuntimeError: another library already overrides one of the four
            operators from Python for one of these device types.

    Example:
        >>> stats = pygpukit_torch.enable_globally()
        >>> y = model(x)                      # every float32 product on the ops
        >>> pygpukit_torch.disable_globally()
        >>> print(stats.summary())
    """
    global _library
    if precision is not None:
        _check_precision_is_str("enable_globally", precision)
        if precision not in PRECISIONS:
            raise ValueError(f"enable_globally: unknown precision '{_printable(precision)}'; expected one of "
                             f"{', '.join(map(repr, PRECISIONS))}")
    types = _device_types(devices)
    unsupported = sorted(set(types) - set(_DISPATCH_KEYS))
    if unsupported:
        raise ValueError(f"enable_globally: devices must be 'cuda' and/or 'cpu' (pygpukit's ops run there), "
                         f"got {', '.join(map(repr, unsupported))}")
    stats = ScopeStats()
    router = _Router(precision, stats)
    with _lock:
        _disable_locked()
        library = torch.library.Library("aten", "IMPL")
        try:
            with warnings.catch_warnings():
                # torch warns once that a kernel is being overridden: that is the point.
                warnings.filterwarnings("ignore", message=".*[Oo]verrid")
                for device in dict.fromkeys(types):
                    for name in ("mm", "bmm", "addmm", "baddbmm"):
                        library.impl(name, getattr(router, name), _DISPATCH_KEYS[device])
        except BaseException:
            del library  # its registrations go with it
            raise
        _library = library
    return stats


def _disable_locked() -> None:
    global _library
    # Dropping the Library drops its registrations: torch's own kernels are
    # in force again.
    _library = None


def disable_globally() -> None:
    """Give the products back to torch's own kernels; nothing happens if the switch is off.

    CUDA graphs captured while the switch was on keep the kernels they captured.

    Example:
        >>> pygpukit_torch.enable_globally()
        >>> pygpukit_torch.disable_globally()
    """
    with _lock:
        _disable_locked()


def enabled_globally() -> bool:
    """Return whether :func:`enable_globally` is in force.

    Example:
        >>> pygpukit_torch.enabled_globally()
        False
    """
    return _library is not None
