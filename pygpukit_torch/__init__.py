"""pygpukit_torch: a TF32 tensor-core matmul for PyTorch.

``torch.ops.pygpukit.matmul_tf32(a, b)`` (or :func:`matmul_tf32`) multiplies
float32 tensors with torch.matmul's shape rules on our own TF32 GEMM kernels
(CUDA: wgmma + TMA on Hopper, mma.sync on sm_80+), or emulates the same
arithmetic on the CPU. :func:`linear_tf32` is ``act(F.linear(x, weight,
bias))`` with bias and activation fused into the kernel's epilogue;
:class:`TF32Linear` and :func:`swap_linear_` put it into models,
:func:`enable` routes every float32 product of a block to the ops
(:func:`enable_globally`, of the process), and
:mod:`pygpukit_torch.testing` compares results with torch. Start at README.md;
reference pages in docs/ (precision.md, linear_layers.md, limits.md, ...).

Example:
    >>> import torch, pygpukit_torch
    >>> a, b = torch.randn(256, 512, device="cuda"), torch.randn(512, 128, device="cuda")
    >>> c = pygpukit_torch.matmul_tf32(a, b)
"""

import torch  # noqa: F401  (loads libtorch, which _C links against)

from . import _C  # noqa: F401,E402  (registers the pygpukit::* operators)
from .dispatch import force_kernel
from .nn import SwapReport, TF32Linear, swap_linear_, swapped_linear, unswap_linear_
from .ops import kernel_info, linear_tf32, matmul_tf32
from .precision import default_precision
from .process_wide import disable_globally, enable_globally, enabled_globally
from .scope import ScopeStats, enable

if torch.distributed.is_available():
    # DTensor sharding rules, so that tensor parallelism runs our kernel on
    # each rank's shard (see distributed.py).
    from . import distributed  # noqa: F401,E402

#: Whether this build holds the CUDA kernels (False for PYGPUKIT_BUILD_CUDA=0 or
#: a build without nvcc, whose ops then raise on CUDA tensors, naming the cause).
try:
    built_with_cuda: bool = _C.built_with_cuda
except AttributeError:  # an extension built from older sources than this Python code
    raise ImportError(f"{_C.__file__} was built from an older checkout than pygpukit_torch's Python files: "
                      "rebuild it (python -m pip install --no-build-isolation -e . or python setup.py build_ext "
                      "--inplace)") from None

__all__ = ["matmul_tf32", "linear_tf32", "kernel_info", "force_kernel", "default_precision", "enable", "enable_globally",
           "disable_globally", "enabled_globally", "ScopeStats", "TF32Linear", "swap_linear_",
           "unswap_linear_", "swapped_linear", "SwapReport", "built_with_cuda"]
__version__ = "0.1.0"
