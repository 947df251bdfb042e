"""Python side of the pygpukit operators: typed wrappers with their documentation.

The schemas, kernels, argument checks and autograd formulas are C++
(csrc/ops/matmul_tf32.cpp and csrc/ops/linear_tf32.cpp for the schemas, the CPU
kernels and the meta kernels that torch.compile traces with, csrc/cuda/ for
the CUDA kernels, csrc/ops/autograd.cpp for the derivatives). The meta kernels
make the same checks as the others, so a bad call on meta or fake tensors
fails as it does on real ones. While torch.compile traces, Dynamo reports
any such error as ``torch._dynamo.exc.TorchRuntimeError`` (a RuntimeError)
quoting it, e.g. ``got ValueError("matmul_tf32: precision must be ...")``.
"""

from __future__ import annotations

from typing import Optional

import torch


PRECISIONS = ("tf32", "tf32x3", "fp32", "ieee")
ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")
# The operators, looked up once (torch.ops.pygpukit.<name>.default costs
# ~0.4 us per call).
_MATMUL_TF32 = torch.ops.pygpukit.matmul_tf32.default
_LINEAR_TF32 = torch.ops.pygpukit.linear_tf32.default


def _check_wrapper_args(op: str, precision, optional=(), **tensors) -> None:
    """What the op's schema would reject with a message that does not name
    the problem: None or a non-tensor where a tensor belongs (the schema
    takes None for an undefined tensor), a sparse (or other non-strided),
    nested or quantized tensor (they fail in the dispatcher: "Could not run
    ... with arguments from the 'SparseCPU' backend"), a non-string
    precision (the schema's type check). `optional`: the names that may be
    None. With a tensor-like argument (not a tensor, but with
    __torch_function__: fx.Proxy under torch.fx.symbolic_trace, or a
    user's tensor-like) only the precision is checked: its override
    handles the operator (a traced graph records it, and the operator's
    schema and kernels check the tensors when it runs)."""
    if any(not isinstance(t, torch.Tensor) and torch.overrides.is_tensor_like(t) for t in tensors.values()):
        _check_precision_type(op, precision)
        return
    for name, t in tensors.items():
        if t is None and name in optional:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: expected {name} to be a torch.Tensor, got {type(t).__name__}")
        if t.is_nested:
            raise RuntimeError(f"{op}: nested tensors are not supported, got a nested tensor for {name}")
        if t.layout != torch.strided:
            raise RuntimeError(f"{op}: expected dense (strided) tensors, got {name} with layout {t.layout}")
        if t.is_quantized:
            raise RuntimeError(f"{op}: expected float32 tensors, got {name} quantized as {t.dtype}")
    _check_precision_type(op, precision)


def _checked_on_failure(call, check):
    """call(), the operator. Dense tensors of the right kind pass its schema
    and dispatcher unaided, so check() (the tensor checks of
    _check_wrapper_args: run on every call, the wrapper cost 3.3 us on the
    H200's host on top of the operator's 12.5 us, 2026-12-02) runs only
    when the call fails, to raise the error that names the problem instead
    of the dispatcher's; if it finds none, the call's own error is raised.
    Under torch.compile it runs first instead, at trace time only (Dynamo
    then traces no try block)."""
    if torch.compiler.is_compiling():
        check()
        return call()
    try:
        return call()
    except Exception as error:  # re-raised below unless check() names the problem
        failure = error
    try:
        check()  # outside the except block: its error does not chain the dispatcher's
        raise failure
    finally:
        # Either error's traceback holds this frame: without the del, frame
        # and error would form a cycle that keeps the arguments (the
        # tensors) alive until the garbage collector runs.
        del failure


def _check_precision_is_str(op: str, precision) -> None:
    """A TypeError naming the choices for a precision that is neither a
    string nor None (the schema's own type error names neither)."""
    if precision is not None and not isinstance(precision, str):
        raise TypeError(f"{op}: precision must be one of {', '.join(map(repr, PRECISIONS))} or None, "
                        f"got {type(precision).__name__} {precision!r}")


def _check_precision_type(op: str, precision) -> None:
    """_check_precision_is_str, and the ValueError of an unknown precision
    for a string that cannot reach the operator (_utf8)."""
    _check_precision_is_str(op, precision)
    if precision is not None and not _utf8(precision):
        _check_precision(op, precision)  # the ValueError of an unknown precision


def _activation_name(op: str, activation) -> str:
    """None means no activation ("none"); a value that is not a string gets
    a TypeError naming it (the schema's own type error names neither)."""
    if activation is None:
        return "none"
    if not isinstance(activation, str):
        raise TypeError(f"{op}: activation must be one of {', '.join(map(repr, ACTIVATIONS))} or None, "
                        f"got {type(activation).__name__} {activation!r}")
    if not _utf8(activation):
        raise ValueError(_unknown_activation(op, activation))
    return activation


def _unknown_activation(op: str, activation: str) -> str:
    """The message for an activation name that is not one of ACTIVATIONS,
    as the C++ parse_activation words it."""
    return f"{op}: unknown activation '{_printable(activation)}'; expected one of " + ", ".join(
        f"'{a}'" for a in ACTIVATIONS)


def _utf8(text: str) -> bool:
    """Whether `text` can reach the operator: the schema's string arguments
    refuse one that UTF-8 cannot encode (a lone surrogate) with a type error
    naming neither the argument's value nor the choices. Not checked while
    torch.compile traces: Dynamo cannot trace ``encode`` on a str subclass
    (an ``enum.StrEnum`` member), which the operator takes as it is."""
    if torch.compiler.is_compiling():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def matmul_tf32(a: torch.Tensor, b: torch.Tensor, *, precision: Optional[str] = None) -> torch.Tensor:
    """``a @ b`` for float32 tensors on TF32 tensor cores (CUDA), or an emulation of their arithmetic (CPU).

    Shapes follow :func:`torch.matmul` (1-D and batched N-D operands, batch
    dimensions broadcast). Row- and column-major operands (e.g. ``x.mT``) are
    read in place; other strides are copied once. Differentiable: both
    gradients are matmul_tf32 products at the same precision (with ``None``,
    the default when ``backward()`` runs, or the precision of a
    :func:`~pygpukit_torch.default_precision` block open in the calling
    thread). Precision semantics: docs/precision.md; limits: docs/limits.md.

    Args:
        a, b: float32 tensors on the same device (CPU or CUDA), at least 1-D.
        precision: ``"tf32"`` (inputs rounded to TF32, FP32 accumulation;
            relative error ~3e-4, as cuBLAS TF32), ``"tf32x3"`` (3xTF32:
            ~4e-7, below cuBLAS FP32's at large K), ``"fp32"``
            (FP32-accurate by the fastest method: on Hopper the Ozaki
            scheme on INT8 tensor cores for large products, else plain
            FP32; error about FP32's or below, with the known exceptions
            in docs/precision.md), ``"ieee"`` (plain FP32, no tensor cores),
            or ``None`` (default): the default precision (innermost
            ``default_precision`` block, else
            ``PYGPUKIT_PRECISION`` / ``PYGPUKIT_ALLOW_TF32``, else
            ``"tf32"``). On CUDA a few rows of ``a`` with the weight read in
            place run an FP32 GEMV at every precision (docs/precision.md).

    Returns:
        A new contiguous float32 tensor of ``torch.matmul(a, b)``'s shape on
        the operands' device.

    Raises:
        RuntimeError: 0-D operands, a dtype other than float32, operands on
            different devices, shapes that cannot be multiplied/broadcast,
            or a sparse, nested or quantized operand.
        ValueError: an unknown ``precision``.
        TypeError: an operand that is not a tensor (None included) nor a
            tensor-like (an object with ``__torch_function__``, which then
            handles the call), or a ``precision`` that is not a string or
            None.

    Example:
        >>> a, b = torch.randn(128, 64, device="cuda"), torch.randn(64, 256, device="cuda")
        >>> c = pygpukit_torch.matmul_tf32(a, b, precision="tf32x3")
    """
    _check_precision_type("matmul_tf32", precision)
    return _checked_on_failure(lambda: _MATMUL_TF32(a, b, precision=precision),
                               lambda: _check_wrapper_args("matmul_tf32", None, a=a, b=b))


def kernel_info(a: torch.Tensor, b: torch.Tensor, *, precision: Optional[str] = None) -> str:
    """Name the kernel and tile configuration ``matmul_tf32(a, b, precision=precision)`` would run.

    Launches nothing. For meta tensors and those of ``FakeTensorMode`` it
    checks the arguments as :func:`matmul_tf32` does and returns ``"none
    (meta or fake tensors: ...)"``. Inside a ``torch.compile``'d function
    the call is a graph break (an error with ``fullgraph=True``): call it
    outside. More in docs/precision.md ("Choosing a kernel").

    Args:
        a, b: the operands, as for :func:`matmul_tf32`.
        precision: as for :func:`matmul_tf32`.

    Returns:
        A description such as ``"wgmma 128x256x32 stages 4 cluster 2x1 (A
        row-major, B column-major)"`` on an H100/H200, or ``"cpu (TF32
        inputs rounded to nearest even, float64 accumulation)"`` for CPU
        tensors.

    Raises:
        RuntimeError, ValueError, TypeError: as :func:`matmul_tf32` for the
            same arguments.
        RuntimeError: inside ``torch.func.vmap`` (call it outside, on the
            batched operands).

    Example:
        >>> x, w = torch.randn(8, 4096, device="cuda"), torch.randn(1024, 4096, device="cuda")
        >>> pygpukit_torch.kernel_info(x, w.mT)  # what linear_tf32(x, w) runs
    """
    _check_wrapper_args("kernel_info", precision, a=a, b=b)
    if any(_is_vmapped(t) for t in (a, b)):
        raise RuntimeError("kernel_info: called inside torch.func.vmap, whose per-sample tensors are not what "
                           "the kernel runs on: call it outside vmap, on the batched operands")
    return torch.ops.pygpukit.matmul_kernel_info.default(a, b, precision=precision)


def _is_vmapped(t: torch.Tensor) -> bool:
    """Whether `t` is a per-sample view inside torch.func.vmap."""
    is_batched = getattr(torch._C._functorch, "is_batchedtensor", None)
    # Tensor-likes (__torch_function__ objects) are not tensors: they pass.
    return is_batched is not None and isinstance(t, torch.Tensor) and is_batched(t)


def _printable(text: str) -> str:
    """The C++ printable (csrc/ops/error_format.h), for messages raised in Python:
    bytes that are not printable ASCII as \\xNN, the first 64 only."""
    try:
        data = text.encode("utf-8", "surrogateescape")  # the bytes of an environment variable
    except UnicodeEncodeError:
        data = text.encode("utf-8", "surrogatepass")  # a lone surrogate outside that range
    shown = "".join(chr(b) if 0x20 <= b < 0x7F else f"\\x{b:02x}" for b in data[:64])
    return shown + "..." if len(data) > 64 else shown


def _check_precision(op: str, precision: Optional[str]) -> None:
    """The C++ parse_precision's check, for the Python helpers that take a
    precision before any operator runs (nn, testing): the same ValueError
    and message."""
    torch._check_value(precision is None or precision in PRECISIONS,
                       lambda: f"{op}: precision must be {', '.join(map(repr, PRECISIONS))} or None, "
                               f"got '{_printable(precision)}'")


def linear_tf32(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
                activation: Optional[str] = "none", *, precision: Optional[str] = None) -> torch.Tensor:
    """``act(x @ weight.T + bias)``: :func:`torch.nn.functional.linear` plus an activation, fused on TF32 tensor cores.

    On CUDA, bias and activation are applied in the kernel's epilogue and
    the weight is read in place in nn.Linear's layout. Differentiable in x,
    weight and bias, the backward products on matmul_tf32 at the same
    precision; what the backward saves: docs/linear_layers.md.

    Args:
        x: float32 ``[..., in_features]`` (at least 1-D); leading dimensions
            are flattened without copying whenever ``reshape`` can.
        weight: float32 ``[out_features, in_features]``, as nn.Linear stores it.
        bias: float32 ``[out_features]`` or ``None``.
        activation: ``"none"`` (or ``None``), ``"relu"``, ``"gelu"`` (erf
            form, F.gelu's default), ``"gelu_tanh"``
            (``F.gelu(approximate="tanh")``) or ``"silu"``.
        precision: as for :func:`matmul_tf32`.

    Returns:
        A new contiguous float32 tensor ``[..., out_features]`` on x's device.

    Raises:
        RuntimeError: a 0-D x, a weight that is not 2-D, a bias that is not
            ``[out_features]``, a dtype other than float32, tensors on
            different devices, ``x.shape[-1] != weight.shape[1]``, or a
            sparse, nested or quantized tensor.
        ValueError: an unknown ``activation`` or ``precision``.
        TypeError: x or weight not a tensor (None included) nor a
            tensor-like (an object with ``__torch_function__``), a bias that
            is none of these nor None, or an ``activation`` or ``precision``
            that is not a string or None.

    Example:
        >>> x, w, b = torch.randn(32, 512, device="cuda"), torch.randn(256, 512, device="cuda"), torch.randn(256, device="cuda")
        >>> y = pygpukit_torch.linear_tf32(x, w, b, "gelu")  # F.gelu(F.linear(x, w, b))
    """
    _check_precision_type("linear_tf32", precision)
    activation = _activation_name("linear_tf32", activation)
    return _checked_on_failure(
        lambda: _LINEAR_TF32(x, weight, bias, activation, precision=precision),
        lambda: _check_wrapper_args("linear_tf32", None, optional=("bias",), x=x, weight=weight, bias=bias))
