"""Overriding the kernel dispatcher, for tests and benchmarks.

The C++ dispatcher (csrc/cuda/dispatch.cu) picks a kernel per call from the
GPU, the shape, the layouts and the alignment. :func:`force_kernel` overrides
that choice for the duration of a ``with`` block; ``PYGPUKIT_KERNEL``, read
once per process at the first CUDA call, sets the override for the whole
process. The names, the fallback rules and the behaviour under
torch.compile: docs/precision.md ("Choosing a kernel"); the dispatcher's
rules: docs/design.md.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional

import torch

from ._settings import setting_block
from .ops import _printable

#: The names force_kernel takes, as the extension defines them (csrc/ops/gemm_types.h).
KERNELS = tuple(torch.ops.pygpukit._forceable_kernels())


@contextlib.contextmanager
def force_kernel(kernel: Optional[str]) -> Iterator[None]:
    """Run the pygpukit GEMMs of the block on one kernel family, for tests and benchmarks.

    A kernel that cannot run a problem falls back to the automatic choice
    (:func:`pygpukit_torch.kernel_info` says what runs); with
    ``precision="ieee"`` every forced kernel but ``gemv`` runs the FMA
    kernel; CPU tensors are not affected. The override is process-wide, as
    :func:`pygpukit_torch.default_precision` is (docs/precision.md).

    Args:
        kernel: one of ``KERNELS``: ``"wgmma"`` (Hopper, TMA + wgmma),
            ``"wgmma_swap_ab"`` (its variants that read a row-major B in
            place), ``"mma_sync"`` (the portable kernel, automatic tile) or
            ``"mma_sync_large"`` / ``"_medium"`` / ``"_small"`` (one tile),
            ``"skinny"`` (decode-sized M, up to 64 rows in blocks of 16),
            ``"gemv"`` (FP32 GEMVs: 1 row, or up to 16 on either weight
            layout and 64 on a row-major one), ``"fma"`` (FP32 CUDA cores),
            ``"ozaki"`` (precision ``"fp32"`` only: the Ozaki scheme on
            Hopper's INT8 tensor cores at any size it can run),
            ``"auto"`` (the dispatcher's choice); ``None`` changes nothing,
            so ``with force_kernel(args.kernel):`` works when none was given.

    Raises:
        ValueError: an unknown kernel name.
        TypeError: a kernel that is neither a string nor None.
        RuntimeError: entered inside code that torch.compile, torch.export,
            make_fx, torch.fx.symbolic_trace or torch.jit.trace records; enter
            it around the call of the compiled function instead.

    Example:
        >>> with pygpukit_torch.force_kernel("mma_sync"):
        ...     c = pygpukit_torch.matmul_tf32(a, b)
    """
    if kernel is None:
        yield
        return
    if not isinstance(kernel, str):
        raise TypeError(f"force_kernel: kernel must be one of {', '.join(map(repr, KERNELS))} or None, "
                        f"got {type(kernel).__name__} {_printable(repr(kernel))}")
    if kernel not in KERNELS:
        raise ValueError(f"force_kernel: unknown kernel '{_printable(kernel)}'; expected one of {', '.join(KERNELS)}")
    with setting_block("kernel", kernel, caller="force_kernel"):
        yield
