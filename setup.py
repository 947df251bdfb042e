"""Build of pygpukit-torch: one extension module, pygpukit_torch._C.

Build knobs (environment variables):
  TORCH_CUDA_ARCH_LIST   GPU targets, the one place they are set. Default
                         "8.0;8.6;8.9;9.0a;8.0+PTX": sm_80/86/89 machine code,
                         sm_90a (Hopper; its "a" features are the Hopper path's),
                         and compute_80 PTX that newer GPUs JIT-compile.
  PYGPUKIT_BUILD_CUDA    "1" (or true/yes/on) builds the CUDA kernels (fails
                         without nvcc), "0" (or false/no/off) a CPU-only
                         extension; unset or empty: CUDA when nvcc is found.
                         Any other value stops the build.
  MAX_JOBS               parallel compile jobs for ninja (torch's own knob).
  PYGPUKIT_PTXAS_VERBOSE "1" prints registers, shared memory and spills per kernel.
"""

import glob
import os

from setuptools import setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

DEFAULT_ARCHS = "8.0;8.6;8.9;9.0a;8.0+PTX"


def _build_cuda() -> bool:
    value = os.environ.get("PYGPUKIT_BUILD_CUDA", "").strip().lower()
    if not value:  # CUDA_HOME can be set (e.g. /usr/local/cuda) without an nvcc in it
        return CUDA_HOME is not None and os.path.exists(os.path.join(CUDA_HOME, "bin", "nvcc"))
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise SystemExit(f"PYGPUKIT_BUILD_CUDA={os.environ['PYGPUKIT_BUILD_CUDA']!r}: expected 1/true/yes/on "
                     "(build the CUDA kernels) or 0/false/no/off (CPU only)")


build_cuda = _build_cuda()
os.environ.setdefault("TORCH_CUDA_ARCH_LIST", DEFAULT_ARCHS)

cxx_flags = ["-O3"]  # the C++ standard is the one torch.utils.cpp_extension picks for this torch
sources = ["csrc/module.cpp", "csrc/tf32_emulation.cpp", "csrc/matmul_args.cpp", "csrc/matmul_tf32.cpp",
           "csrc/activation.cpp", "csrc/linear_args.cpp", "csrc/linear_tf32.cpp", "csrc/autograd.cpp",
           "csrc/autocast.cpp", "csrc/settings.cpp"]

if build_cuda:
    nvcc_flags = ["-O3", "-lineinfo", "--expt-relaxed-constexpr"]
    if os.environ.get("PYGPUKIT_PTXAS_VERBOSE") == "1":
        nvcc_flags.append("-Xptxas=-v")
    # The Hopper path is dispatched to only when its sm_90a code is built
    # ("9.0a", also as torch's "9.0a+PTX", which builds it too).
    archs = os.environ["TORCH_CUDA_ARCH_LIST"].replace(" ", ";").split(";")
    if "9.0a" in (arch.split("+")[0] for arch in archs):
        nvcc_flags.append("-DPYGPUKIT_HAS_SM90A")
    else:
        print(f"pygpukit-torch: TORCH_CUDA_ARCH_LIST={os.environ['TORCH_CUDA_ARCH_LIST']!r} has no 9.0a: the "
              "Hopper path (wgmma + TMA) is not built; H100/H200 will run the mma.sync path")
    sources += sorted(glob.glob("csrc/cuda/*.cpp")) + sorted(glob.glob("csrc/cuda/*.cu"))
    cxx_flags.append("-DPYGPUKIT_WITH_CUDA")  # module.cpp: pygpukit_torch.built_with_cuda
    ext = CUDAExtension(
        "pygpukit_torch._C",
        sources,
        extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags},
    )
else:
    # CUDA tensors get an error that names the cause instead of the dispatcher's.
    sources.append("csrc/cuda_not_built.cpp")
    ext = CppExtension("pygpukit_torch._C", sources, extra_compile_args={"cxx": cxx_flags})

# Name, version and dependencies live in pyproject.toml.
setup(ext_modules=[ext], cmdclass={"build_ext": BuildExtension})
