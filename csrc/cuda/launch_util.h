// Host-side helpers shared by the kernel launchers.
#pragma once

#include <cstdint>
#include <utility>

#include <cuda_runtime.h>

#include "cuda/gemm_problem.h"
#include "cuda/kernel_setup.h"

namespace pygpukit {

// The step of a GEMM's host work that failed on this thread, for the
// operator's error message (gemm_adapter.cpp clears it before each call and
// names it after a failure); nullptr where none was named.
inline thread_local const char* failed_step = nullptr;

// `err`, naming `step` as the failed one when it is an error and no step
// inside it was named already (the innermost name is the most precise).
inline cudaError_t step_result(cudaError_t err, const char* step) {
  if (err != cudaSuccess && failed_step == nullptr) failed_step = step;
  return err;
}

// Calls launch(block) for `p` cut into blocks of at most `rows` rows of A
// and C, in row order (on one stream, so a block may reuse a workspace the
// previous one's kernels have finished with); stops at the first error.
template <class Launch>
cudaError_t launch_row_blocks(const GemmProblem& p, int64_t rows, Launch&& launch) {
  for (int64_t m0 = 0; m0 < p.M; m0 += rows) {
    GemmProblem block = p;
    block.A = p.A + m0 * p.lda;
    block.C = p.C + m0 * p.ldc;
    block.M = p.M - m0 < rows ? p.M - m0 : rows;
    const cudaError_t err = launch(block);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

// kKernel<<<grid, block, needs.smem_bytes, stream>>>(args...), set up on
// first use (kernel_setup.h), as a programmatic dependent launch where the
// code that runs allows it: the kernel may then start while the previous one
// in the stream still runs, so it must call ptx::programmatic_launch_start
// before it touches global memory (every kernel launched through here
// does), which also lets the next one start early in turn. The launch
// overlaps the previous kernel's tail instead of following its end.
template <auto kKernel, class... Args>
cudaError_t launch_kernel(dim3 grid, dim3 block, const KernelNeeds& needs, cudaStream_t stream,
                          Args&&... args) {
  KernelReady ready;
  cudaError_t err = prepare_kernel<kKernel>(needs, &ready);
  if (err != cudaSuccess) return step_result(err, "setting the kernel up");
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = size_t(needs.smem_bytes);
  config.stream = stream;
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = ready.programmatic ? 1 : 0;
  err = cudaLaunchKernelEx(&config, kKernel, std::forward<Args>(args)...);
  if (err != cudaSuccess) cudaGetLastError();  // reported here: not again at torch's next check
  return step_result(err, ready.programmatic ? "cudaLaunchKernelEx (programmatic)" : "cudaLaunchKernelEx");
}

}  // namespace pygpukit
