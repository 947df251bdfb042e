"""A scope that routes a model's float32 matrix products to pygpukit's ops
without touching the model: ``with pygpukit_torch.enable():``.

Inside the block, calls of ``torch.matmul`` / ``@`` / ``torch.linalg.matmul``, ``torch.mm``,
``torch.bmm``, ``torch.addmm``, ``torch.baddbmm`` (and their Tensor methods),
two-operand ``torch.einsum`` and ``torch.nn.functional.linear`` (so
``nn.Linear`` too) whose operands
are float32 strided tensors on an enabled device run
``pygpukit::matmul_tf32`` or ``pygpukit::linear_tf32``; everything else runs
on torch unchanged. The mechanism is a ``TorchFunctionMode``
(torch.overrides), which torch.compile traces. Reference:
docs/linear_layers.md ("Every float32 product of a block").
"""

from __future__ import annotations

import collections
import contextlib
import math
import string
from dataclasses import dataclass, field
from typing import Iterator, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch.fx.experimental.symbolic_shapes import guard_or_false
from torch.overrides import TorchFunctionMode

from ._settings import context_innermost
from .ops import linear_tf32, matmul_tf32
from .precision import default_precision

_MATMULS = (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.linalg.matmul, torch.mm,
            torch.Tensor.mm, torch.bmm, torch.Tensor.bmm)
_ADDMMS = (torch.addmm, torch.Tensor.addmm, torch.baddbmm, torch.Tensor.baddbmm)
_ROUTED = frozenset(_MATMULS + _ADDMMS + (F.linear, torch.einsum))
_EINSUM_CHARS = frozenset(string.ascii_letters + ".,-> ")


def _unsupported_operands(tensors, devices: Optional[Tuple[str, ...]] = None) -> Optional[str]:
    """Why the ops do not take these operands (devices None: any device), or None if they do."""
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            return "an operand that is not a tensor"
        if t.dtype != torch.float32:
            return f"{t.dtype} operands"
        if t.layout != torch.strided or t.is_nested:
            return "non-strided operands"
        if devices is not None and t.device.type not in devices:
            return f"operands on {t.device.type}"
    return None


def _unmatched_product(kind: str, a: torch.Tensor, b: torch.Tensor, dims: int) -> Optional[str]:
    """Why a @ b is not the product of `dims`-D operands that aten's `kind` takes, or None."""
    if (a.dim() == dims and b.dim() == dims and a.shape[-1] == b.shape[-2] and
            (dims == 2 or a.shape[0] == b.shape[0])):
        return None
    return f"{kind} operands that are not {dims}-D and matching"


def _unbroadcast_input(kind: str, input: torch.Tensor, a: torch.Tensor, b: torch.Tensor, dims: int) -> Optional[str]:
    """Why `kind`'s input does not broadcast to the product a @ b, or None
    (torch then raises its own error for the call)."""
    shape = (*a.shape[:-1], b.shape[-1])
    try:
        if input.dim() <= dims and torch.broadcast_shapes(input.shape, shape) == torch.Size(shape):
            return None
    except RuntimeError:
        pass
    return f"an {kind} input that does not broadcast to the product"


def _real(x) -> Optional[float]:
    """A Scalar argument as a finite float, or None (complex, inf, NaN, a
    tensor: torch's own rules apply)."""
    if isinstance(x, (bool, int, float)) and math.isfinite(float(x)):
        return float(x)
    return None


def _scaled_sum(input: torch.Tensor, product: torch.Tensor, beta, alpha) -> torch.Tensor:
    """beta input + alpha product, by torch's rule that beta = 0 ignores the input (NaN included)."""
    if alpha != 1:
        product = product * alpha
    return product if beta == 0 else torch.add(product, input, alpha=beta)


def _einsum_labels(term: str, ndim: int, ellipsis: int):
    """The labels of one einsum operand's dimensions, its '...' as the last
    dimensions of `ellipsis` broadcast ones (named 0, 1, ..., right-aligned);
    None for a term that does not describe `ndim` dimensions."""
    if term.count("...") > 1:
        return None
    if "..." not in term:
        return list(term) if len(term) == ndim else None
    pre, post = term.split("...")
    own = ndim - len(pre) - len(post)
    if own < 0:
        return None
    return list(pre) + list(range(ellipsis - own, ellipsis)) + list(post)


class _EinsumPlan(NamedTuple):
    """How a two-operand einsum runs as one matmul. Labels are letters, or
    ints for the dimensions of '...'."""

    la: list  # a's labels
    lb: list  # b's labels
    a_sum: list  # labels of a only that the result drops: summed first
    b_sum: list  # the same for b
    batch: list  # labels of both operands that the result keeps
    contracted: list  # labels of both operands that the result drops
    left: list  # labels of a only that the result keeps
    right: list  # labels of b only that the result keeps
    out: list  # the result's labels
    size_a: dict  # a's size by label
    size_b: dict  # b's size by label


def _einsum_plan(equation: str, a: torch.Tensor, b: torch.Tensor):
    """How `einsum(equation, a, b)` runs as one matmul (an _EinsumPlan), or a
    str naming why it cannot."""
    # ASCII letters, commas, one arrow and '...' only ('. ..' is no
    # ellipsis): anything else goes to torch, which raises its own error.
    if "." in equation.replace("...", "") or not set(equation) <= _EINSUM_CHARS:
        return "an einsum equation it does not take"
    eq = equation.replace(" ", "")
    lhs, arrow, out_term = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != 2 or "-" in lhs or ">" in lhs or "," in out_term or "-" in out_term or ">" in out_term:
        return "an einsum equation it does not take"
    ellipsis = max(a.dim() - len(terms[0].replace("...", "")) if "..." in terms[0] else 0,
                   b.dim() - len(terms[1].replace("...", "")) if "..." in terms[1] else 0)
    la, lb = _einsum_labels(terms[0], a.dim(), ellipsis), _einsum_labels(terms[1], b.dim(), ellipsis)
    if la is None or lb is None:
        return "an einsum equation it does not take"
    if len(set(la)) != len(la) or len(set(lb)) != len(lb):
        return "einsum with a repeated label in one operand (a diagonal)"
    if arrow:
        out = _einsum_labels(out_term, len(out_term.replace("...", "")) + (ellipsis if "..." in out_term else 0),
                             ellipsis)
        if out is None or len(set(out)) != len(out) or not set(out) <= set(la) | set(lb) or (
                "..." not in out_term and ellipsis and any(isinstance(x, int) for x in la + lb)):
            return "an einsum equation it does not take"
    else:  # implicit: the broadcast dimensions, then the labels used once, in alphabetical order
        counts = collections.Counter(la + lb)
        out = list(range(ellipsis)) + sorted(x for x in counts if isinstance(x, str) and counts[x] == 1)
    shared = [x for x in la if x in lb]
    batch = [x for x in out if x in shared]
    contracted = [x for x in shared if x not in out]
    left = [x for x in out if x in la and x not in lb]
    right = [x for x in out if x in lb and x not in la]
    a_sum = [x for x in la if x not in lb and x not in out]
    b_sum = [x for x in lb if x not in la and x not in out]
    size_a, size_b = dict(zip(la, a.shape)), dict(zip(lb, b.shape))
    for x in shared:  # a batch dimension of size 1 broadcasts, as matmul's do
        sa, sb = size_a[x], size_b[x]
        # Sizes known only at run time (torch.compile) are assumed to be
        # neither different nor 1 and asserted equal, as torch's own
        # broadcasting does, rather than guarded on.
        if guard_or_false(sa != sb) and not (x in batch and (guard_or_false(sa == 1) or guard_or_false(sb == 1))):
            return "einsum operands whose sizes differ for one label"
        if not (isinstance(sa, int) and isinstance(sb, int)) and not guard_or_false(sa == 1) and not guard_or_false(
                sb == 1):
            torch._check(sa == sb, lambda: f"einsum(): sizes {sa} and {sb} of label {x!r} differ")
    return _EinsumPlan(la, lb, a_sum, b_sum, batch, contracted, left, right, out, size_a, size_b)



@dataclass
class ScopeStats:
    """What an :func:`enable` block or :func:`enable_globally` routed.

    An ``enable`` block counts where the Python call is made: in eager code,
    per call; in torch.compile'd code, once per compilation (the traced
    calls). ``enable_globally`` counts each call of the aten operators.

    Attributes:
        taken: products that ran on pygpukit's ops.
        passed: by reason, the products left to torch.

    Example:
        >>> with pygpukit_torch.enable() as stats:
        ...     y = model(x)
        >>> stats.taken, dict(stats.passed)
    """

    taken: int = 0
    passed: collections.Counter = field(default_factory=collections.Counter)

    def summary(self) -> str:
        """Summarize the counts in one line, e.g. ``"7 products on pygpukit; left to torch: ..."``."""
        passed = ", ".join(f"{why} ({n}x)" for why, n in self.passed.most_common())
        return f"{self.taken} products on pygpukit" + (f"; left to torch: {passed}" if passed else "")


def _innermost_precision() -> Optional[str]:
    """The innermost default_precision block of this thread or task, so that
    a routed call (and its backward) records it."""
    return context_innermost("precision")


class _RouteMatmuls(TorchFunctionMode):
    def __init__(self, devices: Sequence[str], stats: ScopeStats):
        super().__init__()
        self.devices = tuple(devices)
        self.stats = stats

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not torch.compiler.is_compiling():  # eager: one set lookup for the calls it does not route
            try:
                if func not in _ROUTED:
                    return func(*args, **kwargs)
            except TypeError:  # an unhashable callable
                return func(*args, **kwargs)
        if any(func is f for f in _MATMULS):
            kind = "bmm" if func is torch.bmm or func is torch.Tensor.bmm else (
                "mm" if func is torch.mm or func is torch.Tensor.mm else "matmul")
            return self._route(func, args, kwargs, self._matmul, kind)
        if any(func is f for f in _ADDMMS):
            kind = "addmm" if func is torch.addmm or func is torch.Tensor.addmm else "baddbmm"
            return self._route(func, args, kwargs, self._addmm, kind)
        if func is F.linear:
            return self._route(func, args, kwargs, self._linear, "linear")
        if func is torch.einsum:
            return self._route(func, args, kwargs, self._einsum, "einsum")
        return func(*args, **kwargs)

    def _route(self, func, args, kwargs, route, kind):
        """route(...)'s result, or torch's own where it says why not."""
        if torch._C._are_functorch_transforms_active():
            why = "a torch.func transform (grad, vmap, jvp, ...) active"
        else:
            try:
                result = route(kind, *args, **kwargs)
            except TypeError:  # arguments torch would reject or name otherwise: its own error
                result = "arguments it does not take"
            if not isinstance(result, str):
                self.stats.taken += 1
                return result
            why = result
        self.stats.passed[why] += 1
        return func(*args, **kwargs)

    def _check(self, *tensors) -> Optional[str]:
        return _unsupported_operands(tensors, self.devices)

    def _matmul(self, kind, a, b, *, out=None):
        why = "out= given" if out is not None else self._check(a, b)
        if why is None and kind in ("mm", "bmm"):
            why = _unmatched_product(kind, a, b, 2 if kind == "mm" else 3)
        return why or matmul_tf32(a, b, precision=_innermost_precision())

    def _addmm(self, kind, input, m1, m2, *, beta=1, alpha=1, out=None):
        why = "out= given" if out is not None else self._check(input, m1, m2)
        dims = 2 if kind == "addmm" else 3
        why = why or _unmatched_product(kind, m1, m2, dims) or _unbroadcast_input(kind, input, m1, m2, dims)
        real_beta, real_alpha = _real(beta), _real(alpha)
        if why is None and (real_beta is None or real_alpha is None):
            why = f"{kind} with alpha or beta not a finite real number"
        if why is None and (real_alpha == 0 or (real_beta == 0 and input.requires_grad)):
            why = f"{kind} with alpha = 0, or beta = 0 on an input that needs a gradient"
        if why is not None:
            return why
        return _scaled_sum(input, matmul_tf32(m1, m2, precision=_innermost_precision()), real_beta, real_alpha)

    def _einsum(self, kind, equation, *operands):
        # torch.einsum hands the mode (equation, *operands), or (equation,
        # [operands]) for the old list form.
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = tuple(operands[0])
        if not isinstance(equation, str):
            return "an einsum equation it does not take"
        if len(operands) != 2:
            return f"einsum of {len(operands)} operands"
        a, b = operands
        why = self._check(a, b)
        plan = why or _einsum_plan(equation, a, b)
        if isinstance(plan, str):
            return plan
        la, lb = plan.la, plan.lb
        if plan.a_sum:
            a = a.sum([la.index(x) for x in plan.a_sum])
            la = [x for x in la if x not in plan.a_sum]
        if plan.b_sum:
            b = b.sum([lb.index(x) for x in plan.b_sum])
            lb = [x for x in lb if x not in plan.b_sum]

        def sizes(labels, size):
            return [size[x] for x in labels]

        # a as [*batch, left, contracted] and b as [*batch, contracted,
        # right] (left, right and contracted labels flattened into one
        # dimension each), one matmul, then the result's labels in order.
        batch, left, right, contracted = plan.batch, plan.left, plan.right, plan.contracted
        k = math.prod(sizes(contracted, plan.size_a))
        a = a.permute([la.index(x) for x in batch + left + contracted]).reshape(
            *sizes(batch, plan.size_a), math.prod(sizes(left, plan.size_a)), k)
        b = b.permute([lb.index(x) for x in batch + contracted + right]).reshape(
            *sizes(batch, plan.size_b), k, math.prod(sizes(right, plan.size_b)))
        product = matmul_tf32(a, b, precision=_innermost_precision())
        order = batch + left + right
        product = product.reshape(list(product.shape[:len(batch)]) + sizes(left, plan.size_a) +
                                  sizes(right, plan.size_b))
        return product.permute([order.index(x) for x in plan.out])

    def _linear(self, kind, input, weight, bias=None):
        why = self._check(input, weight, *([bias] if bias is not None else []))
        if why is None and (weight.dim() != 2 or (bias is not None and tuple(bias.shape) != weight.shape[:1])):
            why = "F.linear with a weight that is not 2-D or a bias that is not [out_features]"
        return why or linear_tf32(input, weight, bias, precision=_innermost_precision())


def _device_types(devices, caller: str = "pygpukit_torch.enable") -> Tuple[str, ...]:
    """`devices` (a device or device type, or a sequence of them) as device
    types; ValueError for anything else, so that a typo does not route
    nothing silently (an integer would name a CUDA device, bytes a sequence
    of integers)."""
    if isinstance(devices, (str, torch.device)):
        devices = (devices,)
    why = None
    try:
        if isinstance(devices, (bytes, bytearray)) or not all(isinstance(d, (str, torch.device)) for d in devices):
            why = "each must be a string or a torch.device"
        else:
            types = tuple(torch.device(d).type for d in devices)
    except (TypeError, RuntimeError) as error:
        why = str(error)
    if why is not None:
        raise ValueError(f"{caller}: devices must be device types such as 'cuda' or 'cpu' (or torch.device "
                         f"objects), got {devices!r}: {why}") from None
    if not types:
        raise ValueError(f"{caller}: devices is empty: nothing would be routed")
    return types


@contextlib.contextmanager
def enable(precision: Optional[str] = None, *, devices: Sequence[str] = ("cuda",)) -> Iterator[ScopeStats]:
    """Route the float32 matrix products made in this thread to pygpukit's ops.

    A thread-local torch-function mode; autograd runs through the ops' own
    backward. Two-operand ``torch.einsum`` runs as one matmul on the ops;
    products that torch makes from C++ (attention kernels) and those under
    a ``torch.func`` transform stay on torch. What is routed and what it costs: docs/linear_layers.md.

    Args:
        precision: ``"tf32"``, ``"tf32x3"``, ``"fp32"`` or ``"ieee"`` for the routed
            products, as a :func:`pygpukit_torch.default_precision` block
            (process-wide) around them; ``None`` keeps the default in force.
        devices: the device types whose products are routed (a string, a
            ``torch.device`` or a sequence of them; ``"cuda:1"`` counts as
            ``"cuda"``; ``"cpu"`` routes CPU products to the CPU emulation,
            for tests).

    Returns:
        (as the ``with`` target) a :class:`ScopeStats` counting the products
        routed and, by reason, those left to torch.

    Raises:
        ValueError: an unknown precision, or devices that are not device types.
        RuntimeError: entered inside code that torch.compile traces (enter
            it around the call of the compiled function).

    Example:
        >>> with pygpukit_torch.enable() as stats:
        ...     y = model(x)
        >>> print(stats.summary())
    """
    if torch.compiler.is_compiling():
        raise RuntimeError("pygpukit_torch.enable: cannot be entered inside a function compiled by torch.compile; "
                           "enter the block around the call of the compiled function")
    stats = ScopeStats()
    devices = _device_types(devices)
    with default_precision(precision), _RouteMatmuls(devices, stats):
        yield stats
