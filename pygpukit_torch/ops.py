"""Python side of the pygpukit operators: typed wrappers, fake (meta)
implementations for torch.compile, and autograd formulas.

The schemas and kernels are C++ (csrc/matmul_tf32.cpp for the schema and the
CPU kernel, csrc/cuda/ for the CUDA kernel); this file only adds what PyTorch
wants in Python.
"""

from __future__ import annotations

from typing import Optional

import torch

PRECISIONS = ("tf32", "tf32x3", "ieee")
ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")


def matmul_tf32(a: torch.Tensor, b: torch.Tensor, *, precision: Optional[str] = None) -> torch.Tensor:
    """``a @ b`` for float32 tensors on TF32 tensor cores.

    Shapes follow :func:`torch.matmul`: 1-D·1-D (dot), 1-D·2-D, 2-D·1-D,
    2-D·2-D, and batched N-D operands whose batch dimensions broadcast.
    The result is a new contiguous float32 tensor on the operands' device.

    Args:
        a, b: float32 tensors on the same device (CPU or CUDA), at least 1-D.
            Row-major and column-major (e.g. ``x.mT``) operands are read in
            place; other strides are copied once.
        precision: ``"tf32"``: inputs rounded to TF32 (10 mantissa bits, round
            to nearest), products accumulated in FP32 on tensor cores; relative
            error about 3e-4, like cuBLAS TF32. ``"tf32x3"``: 3xTF32, each input
            split into a TF32 "big" part and a TF32 "small" remainder and
            ``a_small·b_big + a_big·b_small + a_big·b_big`` accumulated in FP32
            on tensor cores, at about a quarter of TF32's rate. The tensor
            cores' own accumulation is not rounded to nearest, so the Hopper
            kernel adds its partial sums into FP32 registers every 128 of K:
            on an H200 the relative error is 3.6e-7 at 4096^3 and 3.7e-7 at
            8192^3, below cuBLAS FP32's 1.15e-6 and 1.6e-6 (but 3.4e-7 vs
            1.5e-7 at 256^3: for K below a few hundred, FP32 is better). The
            mma.sync path (GPUs other than H100/H200) does not promote yet: its
            error grows with K, 9.6e-6 at K=4096. ``"ieee"``: plain FP32 arithmetic, no tensor cores.
            ``None`` (default): the environment variable
            ``PYGPUKIT_PRECISION`` (one of those names; see
            :func:`pygpukit_torch.default_precision`) if set, else ``"ieee"``
            if ``PYGPUKIT_ALLOW_TF32`` is ``0``/``false``/``no``/``off``, else
            ``"tf32"``. PyTorch's own TF32 settings are not consulted.
            On the CPU every precision is emulated: inputs rounded (ties to
            even) or split the same way, products accumulated in float64.

    Raises:
        RuntimeError: 0-D operands, a dtype other than float32, operands on
            different devices, or shapes that cannot be multiplied/broadcast.
        ValueError: an unknown ``precision``.
    """
    return torch.ops.pygpukit.matmul_tf32.default(a, b, precision=precision)


def kernel_info(a: torch.Tensor, b: torch.Tensor, *, precision: Optional[str] = None) -> str:
    """Name of the kernel and tile configuration ``matmul_tf32(a, b,
    precision=precision)`` would run for these operands, e.g. ``"wgmma
    128x256x32 stages 4 cluster 2x1 (A row-major, B column-major)"`` on an
    H100/H200, or ``"cpu (TF32 inputs rounded to nearest even, float64
    accumulation)"`` for CPU tensors. Launches nothing."""
    return torch.ops.pygpukit.matmul_kernel_info.default(a, b, precision=precision)


def _matmul_shape(a: torch.Tensor, b: torch.Tensor) -> list:
    """Output shape of ``a @ b`` with the C++ operator's checks and messages."""
    torch._check(a.dim() >= 1 and b.dim() >= 1,
                 lambda: f"matmul_tf32: both arguments need at least 1 dimension, got a.dim() = {a.dim()} "
                         f"and b.dim() = {b.dim()}")
    torch._check(a.dtype == torch.float32 and b.dtype == torch.float32,
                 lambda: f"matmul_tf32: expected float32 tensors, got a of dtype {a.dtype} and b of dtype {b.dtype}")
    torch._check(a.device == b.device,
                 lambda: f"matmul_tf32: expected a and b on the same device, got a on {a.device} and b on {b.device}")
    k_b = b.shape[0] if b.dim() == 1 else b.shape[-2]
    torch._check(a.shape[-1] == k_b,
                 lambda: f"matmul_tf32: shapes cannot be multiplied: a has shape {list(a.shape)} and b has shape "
                         f"{list(b.shape)}")
    batch = list(torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    out = batch
    if a.dim() >= 2:
        out = out + [a.shape[-2]]
    if b.dim() >= 2:
        out = out + [b.shape[-1]]
    return out


def _check_precision(op: str, precision: Optional[str]) -> None:
    """The C++ parse_precision's check, for the fake implementations."""
    torch._check(precision is None or precision in PRECISIONS,
                 lambda: f"{op}: precision must be 'tf32', 'tf32x3', 'ieee' or None, got {precision!r}")


@torch.library.register_fake("pygpukit::matmul_tf32")
def _(a, b, *, precision=None):
    _check_precision("matmul_tf32", precision)
    # Contiguous, exactly like the CUDA and CPU kernels' results.
    return a.new_empty(_matmul_shape(a, b))


def _setup_context(ctx, inputs, keyword_only_inputs, output):
    a, b = inputs
    # grad_a needs only b and grad_b only a: save no more than asked for.
    ctx.save_for_backward(a if ctx.needs_input_grad[1] else None,
                          b if ctx.needs_input_grad[0] else None)
    ctx.a_shape, ctx.b_shape = a.shape, b.shape
    ctx.precision = keyword_only_inputs.get("precision")


def _backward(ctx, grad):
    """grad_a = grad @ bᵀ, grad_b = aᵀ @ grad, on the same op and precision.

    1-D operands are promoted to matrices the way torch.matmul does, the
    transposes are views (read in place as column-major), and broadcast batch
    dimensions are summed back to each input's shape.
    """
    a, b = ctx.saved_tensors
    a_shape, b_shape = ctx.a_shape, ctx.b_shape
    g = grad
    if len(b_shape) == 1:
        g = g.unsqueeze(-1)
    if len(a_shape) == 1:
        g = g.unsqueeze(-2)
    grad_a = grad_b = None
    if ctx.needs_input_grad[0]:
        b2 = b.unsqueeze(-1) if b.dim() == 1 else b
        ga = matmul_tf32(g, b2.mT, precision=ctx.precision)
        a2_shape = (1,) + tuple(a_shape) if len(a_shape) == 1 else tuple(a_shape)
        grad_a = ga.sum_to_size(a2_shape).reshape(a_shape)
    if ctx.needs_input_grad[1]:
        a2 = a.unsqueeze(0) if a.dim() == 1 else a
        gb = matmul_tf32(a2.mT, g, precision=ctx.precision)
        b2_shape = tuple(b_shape) + (1,) if len(b_shape) == 1 else tuple(b_shape)
        grad_b = gb.sum_to_size(b2_shape).reshape(b_shape)
    return grad_a, grad_b


torch.library.register_autograd("pygpukit::matmul_tf32", _backward, setup_context=_setup_context)


def linear_tf32(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
                activation: str = "none", *, precision: Optional[str] = None) -> torch.Tensor:
    """``act(x @ weight.T + bias)``, :func:`torch.nn.functional.linear` plus an
    activation, fused on TF32 tensor cores.

    On CUDA, bias and activation are applied to the accumulators in registers
    before the output's only store (no extra pass over memory), and the
    weight is read in place in nn.Linear's layout, never transposed by a copy.

    Args:
        x: float32 ``[..., in_features]`` (at least 1-D). Its leading
            dimensions are flattened into rows without copying whenever
            ``reshape`` can (contiguous tensors, row-major views); row- or
            column-major 2-D views are read in place; other strides cost one copy.
        weight: float32 ``[out_features, in_features]``, as nn.Linear stores it.
        bias: float32 ``[out_features]`` or ``None``.
        activation: ``"none"``, ``"relu"``, ``"gelu"`` (erf form, F.gelu's
            default), ``"gelu_tanh"`` (``F.gelu(approximate="tanh")``) or ``"silu"``.
        precision: as for :func:`matmul_tf32`.

    Returns:
        A new contiguous float32 tensor ``[..., out_features]`` on x's device.

    Raises:
        RuntimeError: a 0-D x, a weight that is not 2-D, a bias that is not
            ``[out_features]``, a dtype other than float32, tensors on
            different devices, or ``x.shape[-1] != weight.shape[1]``.
        ValueError: an unknown ``activation`` or ``precision``.
    """
    return torch.ops.pygpukit.linear_tf32.default(x, weight, bias, activation, precision=precision)


@torch.library.register_fake("pygpukit::linear_tf32")
def _(x, weight, bias=None, activation="none", *, precision=None):
    _check_precision("linear_tf32", precision)
    torch._check(activation in ACTIVATIONS,
                 lambda: f"linear_tf32: unknown activation {activation!r}; expected one of "
                         + ", ".join(repr(a) for a in ACTIVATIONS))
    tensors = [x, weight] + ([bias] if bias is not None else [])
    torch._check(x.dim() >= 1, lambda: "linear_tf32: x needs at least 1 dimension, got a 0-d tensor")
    torch._check(weight.dim() == 2,
                 lambda: f"linear_tf32: expected weight of shape [out_features, in_features], got shape "
                         f"{list(weight.shape)}")
    torch._check(bias is None or (bias.dim() == 1 and bias.shape[0] == weight.shape[0]),
                 lambda: f"linear_tf32: expected bias of shape [{weight.shape[0]}], got shape {list(bias.shape)}")
    torch._check(all(t.dtype == torch.float32 for t in tensors),
                 lambda: f"linear_tf32: expected float32 tensors, got dtypes {[t.dtype for t in tensors]}")
    torch._check(all(t.device == x.device for t in tensors),
                 lambda: f"linear_tf32: expected x, weight and bias on the same device, got "
                         f"{[str(t.device) for t in tensors]}")
    torch._check(x.shape[-1] == weight.shape[1],
                 lambda: f"linear_tf32: x's last dimension must equal weight's in_features: x has shape "
                         f"{list(x.shape)} and weight has shape {list(weight.shape)}")
    # Contiguous, exactly like the CUDA and CPU kernels' results.
    return x.new_empty(tuple(x.shape[:-1]) + (weight.shape[0],))


def _linear_setup_context(ctx, inputs, keyword_only_inputs, output):
    x, weight, bias, activation = inputs
    need_x, need_w = ctx.needs_input_grad[:2]
    ctx.activation = activation
    ctx.precision = keyword_only_inputs.get("precision")
    ctx.has_bias = bias is not None
    # The activation's derivative needs the pre-activation z = x @ weight.T +
    # bias, which the op does not return. Saving it would take a second
    # output: an extra M x N store in every forward, inference included, and
    # M x N more activation memory per layer in training. Instead backward
    # recomputes z with one more (non-activated) linear_tf32, like activation
    # checkpointing; the kernels are deterministic, so it is bitwise the
    # forward's z. ReLU needs no z: z > 0 exactly where the output is > 0.
    recompute = activation in ("gelu", "gelu_tanh", "silu")
    ctx.save_for_backward(x if (need_w or recompute) else None,
                          weight if (need_x or recompute) else None,
                          bias if recompute else None,
                          output if activation == "relu" else None)


def _activation_backward(ctx, grad, x, weight, bias, output):
    """dL/dz from dL/dy for y = act(z), with ATen's own derivative formulas."""
    act = ctx.activation
    if act == "none":
        return grad
    if act == "relu":
        return torch.ops.aten.threshold_backward(grad, output, 0)
    z = linear_tf32(x, weight, bias, precision=ctx.precision)
    if act == "silu":
        # silu'(z) = s (1 + z (1 - s)), s = sigmoid(z), in differentiable ops
        # (aten.silu_backward has no derivative of its own: double backward).
        s = torch.sigmoid(z)
        return grad * s * (1 + z * (1 - s))
    return torch.ops.aten.gelu_backward(grad, z, approximate="tanh" if act == "gelu_tanh" else "none")


def _linear_backward(ctx, grad):
    """With g = dL/dz: grad_x = g @ weight, grad_weight = gᵀ @ x (over all
    rows), grad_bias = g summed over rows; the products on matmul_tf32 at the
    forward's precision, transposes read in place."""
    x, weight, bias, output = ctx.saved_tensors
    g = _activation_backward(ctx, grad, x, weight, bias, output)
    # The dispatcher drops arguments equal to their defaults (bias=None), so
    # needs_input_grad can be shorter than the schema's argument list.
    need_x, need_w, need_b = (tuple(ctx.needs_input_grad) + (False,) * 3)[:3]
    grad_x = matmul_tf32(g, weight, precision=ctx.precision) if need_x else None
    g2 = _rows(g)
    grad_w = matmul_tf32(g2.mT, _rows(x), precision=ctx.precision) if need_w else None
    grad_b = g2.sum(0) if (need_b and ctx.has_bias) else None
    return grad_x, grad_w, grad_b, None


def _rows(t: torch.Tensor) -> torch.Tensor:
    """t[..., C] as a matrix [rows, C] (a 1-D t is one row); unlike
    reshape(-1, C) it also works when C or a leading dimension is 0."""
    return t.unsqueeze(0) if t.dim() == 1 else t.flatten(0, -2)


torch.library.register_autograd("pygpukit::linear_tf32", _linear_backward, setup_context=_linear_setup_context)
