"""Overriding the kernel dispatcher, for tests and benchmarks.

The C++ dispatcher (csrc/cuda/dispatch.cu) picks a kernel per call from the
GPU, the shape, the layouts and the alignment. :func:`force_kernel` overrides
that choice for the duration of a ``with`` block; ``PYGPUKIT_KERNEL``, read
once per process at the first CUDA call, sets the override for the whole
process (a name that is not in ``KERNELS`` raises ValueError at every CUDA
call; changing the variable later raises RuntimeError). A forced kernel that
cannot run a given problem (``wgmma`` off Hopper, ``mma_sync_large`` with
unaligned operands, ``skinny`` with more than 64 rows, ``gemv`` with more
than 16 on a K-major weight or 64 on a row-major one) falls back to the
automatic choice; :func:`pygpukit_torch.kernel_info` tells what a call
actually runs. CPU tensors always run the CPU emulation.

Compiled code follows the block around its call in every torch.compile mode
(a change recompiles, CUDA graphs included); a CUDA graph captured by hand
replays the kernels it recorded.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional

import torch

from ._settings import setting_block
from .ops import _printable

#: The names force_kernel takes, as the extension defines them (csrc/gemm_types.h).
KERNELS = tuple(torch.ops.pygpukit._forceable_kernels())


@contextlib.contextmanager
def force_kernel(kernel: Optional[str]) -> Iterator[None]:
    """Run every pygpukit GEMM inside the block on ``kernel``.

    Args:
        kernel: one of ``pygpukit_torch.dispatch.KERNELS``. ``wgmma``: the Hopper TMA + wgmma
            kernel (sm_90a builds on compute capability 9.0). ``wgmma_swap_ab``:
            its variants that read B in place into registers: for a plain
            ``a @ b`` with both operands row-major and 16-byte aligned
            (precision "tf32"; tiles of 64 rows of C for M <= 64, 128 up to
            M = 128, 256 above; the automatic choice for such products,
            unless 128x128 tiles finish
            sooner at M > 128), and for precision "tf32x3" at M <= 128 with
            B in either layout, split in registers (what ``wgmma`` runs
            there too). ``mma_sync``:
            the portable mma.sync kernel with its automatic tile choice;
            ``mma_sync_large|medium|small``: one tile configuration.
            ``skinny``: the decode-sized-M kernel (M <= 16, and forced up
            to 64, above 16 in blocks of 16 rows, one pass over B each; both operands
            K-major as in ``F.linear``, 16-byte aligned; sm_80 and newer).
            ``gemv``: the single-row kernels (M = 1, FP32 FMAs whatever the
            precision; the weight either K-major as for ``skinny`` or
            row-major as in ``x @ W`` with ``W`` stored [in, out], 16-byte
            aligned), which the automatic choice takes for every such row;
            forcing another kernel runs that one instead. Forced, they
            also run 2 to 16 rows of ``x`` (rows 16-byte aligned, no batch
            of the weight) on either layout, in FP32, every load of the
            weight shared by all rows, and up to 64 rows on a row-major
            weight in blocks of 16 (one pass over the weight each);
            unforced, they serve those rows where they are the faster
            choice on the H200 (up to 8 rows of a row-major weight and 4 of
            a K-major one in TF32; 16 and 8 in 3xTF32, 48 and 8 off Hopper;
            32 and 16 in FP32).
            ``fma``: the FP32 CUDA-core kernel. ``auto``: the dispatcher's
            choice. ``None``: the block changes nothing (whatever
            ``PYGPUKIT_KERNEL`` says stays in force), as for
            :func:`pygpukit_torch.default_precision`, so
            ``with force_kernel(args.kernel):`` works when none was given.

    Raises:
        ValueError: an unknown kernel name.
        TypeError: a kernel that is neither a string nor None.
        RuntimeError: entered inside a function that ``torch.compile`` traces;
            put the ``with`` block around the call of the compiled function.
            With ``fullgraph=True`` torch reports it as
            ``torch._dynamo.exc.Unsupported`` quoting this error; without,
            Dynamo runs that code eagerly, where the block works. Also
            entered while torch.export, make_fx, torch.fx.symbolic_trace or
            torch.jit.trace records the function.

    The override is process-wide: while the block is the innermost open one
    it applies to calls in every thread, so it is not meant for concurrent
    use from several threads with different kernels (blocks that overlap in
    threads and close out of order still leave the right setting). A kernel that cannot run
    a given problem falls back to the automatic choice, except that with
    ``precision="ieee"`` any forced kernel but ``gemv`` runs the FMA kernel
    (tensor-core kernels do not compute in FP32); CPU tensors are not
    affected.
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
