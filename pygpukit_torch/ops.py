"""Python side of the pygpukit operators: typed wrappers, fake (meta)
implementations for torch.compile, and autograd formulas.

The schemas and kernels are C++ (csrc/matmul_tf32.cpp for the schema and the
CPU kernel, csrc/cuda/ for the CUDA kernel); this file only adds what PyTorch
wants in Python.
"""

from __future__ import annotations

from typing import Optional

import torch

PRECISIONS = ("tf32", "ieee")


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
            error about 3e-4, like cuBLAS TF32. ``"ieee"``: plain FP32
            arithmetic, no tensor cores. ``None`` (default): ``"tf32"`` unless
            the environment variable ``PYGPUKIT_ALLOW_TF32`` is ``0``.
            PyTorch's own TF32 settings are not consulted.

    Raises:
        RuntimeError: 0-D operands, a dtype other than float32, operands on
            different devices, or shapes that cannot be multiplied/broadcast.
        ValueError: an unknown ``precision``.
    """
    return torch.ops.pygpukit.matmul_tf32.default(a, b, precision=precision)


def kernel_info(a: torch.Tensor, b: torch.Tensor, *, precision: Optional[str] = None) -> str:
    """Name of the kernel and tile configuration ``matmul_tf32(a, b)`` runs."""
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


@torch.library.register_fake("pygpukit::matmul_tf32")
def _(a, b, *, precision=None):
    torch._check(precision is None or precision in PRECISIONS,
                 lambda: f"matmul_tf32: precision must be 'tf32', 'ieee' or None, got {precision!r}")
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
