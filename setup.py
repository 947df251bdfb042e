"""Build of pygpukit-torch: one extension module, pygpukit_torch._C.

Build knobs (environment variables):
  TORCH_CUDA_ARCH_LIST   GPU targets, the one place they are set. Unset: the
                         GPUs visible at build time (compute capability 9.0
                         as 9.0a, whose "a" features are the Hopper path's;
                         a GPU newer than nvcc knows as PTX of the newest
                         target it knows), or, with no GPU visible (CI,
                         wheels), "8.0;8.6;8.9;9.0a;8.0+PTX": sm_80/86/89
                         machine code, sm_90a, and compute_80 PTX that newer
                         GPUs JIT-compile.
  PYGPUKIT_BUILD_CUDA    "1" (or true/yes/on) builds the CUDA kernels (fails
                         without nvcc), "0" (or false/no/off) a CPU-only
                         extension; unset or empty: CUDA when nvcc is found.
                         Any other value stops the build.
  MAX_JOBS               parallel compile jobs for ninja (torch's own knob).
  PYGPUKIT_PTXAS_VERBOSE "1" prints registers, shared memory and spills per kernel.
"""

import glob
import os
import re
import subprocess
from typing import List, Sequence, Tuple

import torch
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


def _nvcc_archs() -> List[Tuple[int, int]]:
    """The compute capabilities nvcc can build for, as (major, minor)."""
    out = subprocess.run([os.path.join(CUDA_HOME, "bin", "nvcc"), "--list-gpu-arch"], capture_output=True,
                         text=True, check=True).stdout
    return sorted((int(code[:-1]), int(code[-1])) for code in re.findall(r"compute_(\d+)", out))


def arch_list_for(capabilities: Sequence[Tuple[int, int]], known: Sequence[Tuple[int, int]]) -> str:
    """TORCH_CUDA_ARCH_LIST for GPUs of these compute capabilities, given the
    ones nvcc knows: each as itself (9.0 as 9.0a, for the Hopper path), or
    where nvcc does not know it, PTX of the newest target it knows below it,
    which the driver compiles at first load. GPUs older than compute
    capability 8.0 get nothing: the kernels need sm_80."""
    archs = []
    for major, minor in sorted(set(capabilities)):
        if (major, minor) < (8, 0):
            continue  # the kernels need sm_80 (mma.sync TF32, cp.async)
        if (major, minor) in known:
            arch = "9.0a" if (major, minor) == (9, 0) else f"{major}.{minor}"
        else:
            older = [k for k in known if k <= (major, minor)]
            if not older:
                continue  # older than every target nvcc knows: nothing to build for it
            arch = "{}.{}+PTX".format(*older[-1])
        if arch not in archs:
            archs.append(arch)
    return ";".join(archs)


def _arch_list() -> str:
    """TORCH_CUDA_ARCH_LIST as set, else for the visible GPUs, else the full default."""
    if os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip():
        return os.environ["TORCH_CUDA_ARCH_LIST"]
    if not torch.cuda.is_available():
        print(f"pygpukit-torch: no CUDA GPU visible: building for {DEFAULT_ARCHS} (set TORCH_CUDA_ARCH_LIST "
              "to choose)")
        return DEFAULT_ARCHS
    gpus = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
    archs = arch_list_for([(g.major, g.minor) for g in gpus], _nvcc_archs())
    names = ", ".join(sorted({f"{g.name} ({g.major}.{g.minor})" for g in gpus}))
    if not archs:
        raise SystemExit(f"pygpukit-torch: none of the visible GPUs ({names}) can run the kernels (they need "
                         "compute capability 8.0 or newer): set PYGPUKIT_BUILD_CUDA=0 for the CPU path, or "
                         "TORCH_CUDA_ARCH_LIST to build for other GPUs")
    print(f"pygpukit-torch: building for the visible GPUs, {names}: TORCH_CUDA_ARCH_LIST={archs} (set "
          f"TORCH_CUDA_ARCH_LIST to choose others, e.g. {DEFAULT_ARCHS!r} for every supported GPU)")
    return archs


def main() -> None:
    build_cuda = _build_cuda()
    if build_cuda:
        os.environ["TORCH_CUDA_ARCH_LIST"] = _arch_list()

    cxx_flags = ["-O3"]  # the C++ standard is the one torch.utils.cpp_extension picks for this torch
    # csrc/ops: the operators (schemas, checks, CPU emulation, autograd,
    # autocast, settings); csrc/cuda: the CUDA adapters, the kernel choice and
    # one folder per kernel family. Includes are written from csrc.
    not_built = "csrc/ops/cuda_not_built.cpp"
    sources = [path for path in sorted(glob.glob("csrc/ops/*.cpp")) if path != not_built]
    include_dirs = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc")]

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
        sources += sorted(glob.glob("csrc/cuda/**/*.cpp", recursive=True))
        sources += sorted(glob.glob("csrc/cuda/**/*.cu", recursive=True))
        cxx_flags.append("-DPYGPUKIT_WITH_CUDA")  # module.cpp: pygpukit_torch.built_with_cuda
        ext = CUDAExtension(
            "pygpukit_torch._C",
            sources,
            include_dirs=include_dirs,
            extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags},
        )
    else:
        # CUDA tensors get an error that names the cause instead of the dispatcher's.
        print("pygpukit-torch: building the CPU path only (PYGPUKIT_BUILD_CUDA=0, or no nvcc): CUDA tensors "
              "will raise an error saying so")
        sources.append(not_built)
        ext = CppExtension("pygpukit_torch._C", sources, include_dirs=include_dirs,
                           extra_compile_args={"cxx": cxx_flags})

    # Name, version and dependencies live in pyproject.toml.
    setup(ext_modules=[ext], cmdclass={"build_ext": BuildExtension})


if __name__ == "__main__":  # also when pip's build backend runs this file
    main()
