// Compiled only into a CPU-only build (setup.py: PYGPUKIT_BUILD_CUDA=0, or
// no nvcc at build time). CUDA tensors then reach this kernel instead of the
// dispatcher's generic "Could not run ... with arguments from the 'CUDA'
// backend", and learn why and what to do.
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

namespace pygpukit {
namespace {

// Boxed, so that one function serves every operator whatever its signature.
void cuda_not_built(const c10::OperatorHandle& op, torch::jit::Stack* /*stack*/) {
  TORCH_CHECK(false, op.schema().name(),
              ": got CUDA tensors, but this pygpukit_torch was built without its CUDA kernels "
              "(PYGPUKIT_BUILD_CUDA=0, or no nvcc found when it was built), so it runs CPU tensors "
              "only; reinstall it on a machine with the CUDA toolkit (nvcc) to use the GPU");
}

}  // namespace
}  // namespace pygpukit

TORCH_LIBRARY_IMPL(pygpukit, CUDA, m) {
  for (const char* op : {"matmul_tf32", "matmul_kernel_info", "linear_tf32"})
    m.impl(op, torch::CppFunction::makeFromBoxedFunction<&pygpukit::cuda_not_built>());
}
