"""Helpers for comparing pygpukit's matmul with torch.matmul in tests and
benchmarks."""

from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def cublas_tf32(enabled: bool):
    """Runs torch.matmul on CUDA with TF32 on (``enabled``) or off, restoring
    the caller's setting. Uses ``torch.backends.cuda.matmul.fp32_precision``
    where it exists: once it is set, the legacy ``allow_tf32`` getter raises."""
    mm = torch.backends.cuda.matmul
    new_api = hasattr(mm, "fp32_precision")
    if new_api:
        old, mm.fp32_precision = mm.fp32_precision, "tf32" if enabled else "ieee"
    else:
        old, mm.allow_tf32 = mm.allow_tf32, enabled
    try:
        yield
    finally:
        if new_api:
            mm.fp32_precision = old
        else:
            mm.allow_tf32 = old


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖, computed in float64 (outside autograd)."""
    ref = ref.detach().double()
    return float((out.detach().double() - ref).norm() / ref.norm())
