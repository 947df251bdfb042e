// Torch-free description of one (batched) GEMM, C = epilogue(A @ B), and the
// launcher that runs it. Everything the kernels need is here as raw pointers,
// sizes and strides, so the kernels can be tested and benchmarked without
// torch, and only the ATen adapters (gemm_adapter.h and the operators'
// *_cuda.cpp files) know about at::Tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <cuda_runtime.h>

#include "ops/gemm_types.h"

namespace pygpukit {

struct Epilogue {
  const float* bias = nullptr;  // [N], added to every row; nullptr for none
  Activation activation = Activation::kNone;
};

// C[b] = epilogue(A[b] @ B[b]) for b in [0, batch). Sizes and strides are in
// elements (float32), 64-bit. C is row-major with leading dimension ldc.
// A batch stride of 0 broadcasts that operand over the batch.
struct GemmProblem {
  int64_t M = 0, N = 0, K = 0, batch = 1;
  const float* A = nullptr;
  int64_t lda = 0, batch_stride_a = 0;
  Layout layout_a = Layout::kRowMajor;
  const float* B = nullptr;
  int64_t ldb = 0, batch_stride_b = 0;
  Layout layout_b = Layout::kRowMajor;
  float* C = nullptr;
  int64_t ldc = 0, batch_stride_c = 0;
  Epilogue epilogue;
  // A and B hold 3xTF32's packed big and small parts, 3K columns (set by
  // the dispatcher when it stages them; the kernels do not read it).
  bool split3_parts = false;
  // The kernel family forced for this call (settings.h), read once per call
  // so that sizing the workspace and launching choose alike.
  ForcedKernel forced = ForcedKernel::kAuto;
};

// Bytes of device scratch memory run_gemm needs for `problem` on the current
// device: 0 for most problems; operands the Hopper path stages (packed
// K-major, or split into 3xTF32 parts, on any GPU), and the split-K
// partials of the Hopper path, the row-major GEMV and the FP32 kernel. The caller allocates
// it, so all memory comes from its allocator.
size_t gemm_workspace_bytes(const GemmProblem& problem, Precision precision);

// Runs `problem` on the current device, on `stream`, with no host
// synchronization and no allocation. Requires M, N, K >= 1 and batch >= 1,
// and `workspace` pointing to workspace_bytes bytes (256-byte aligned; size
// them with gemm_workspace_bytes) that stay untouched until the work on
// `stream` is done. Returns the first launch error (cudaSuccess when
// launched); cudaErrorInvalidValue, launching nothing, where the workspace
// is smaller than the chosen kernel needs (except stream-K, which is left
// out rather: a plan sized before, e.g. under another PYGPUKIT_STREAM_K).
cudaError_t run_gemm(const GemmProblem& problem, Precision precision, void* workspace,
                     size_t workspace_bytes, cudaStream_t stream);

// A short human-readable name of the kernel and tile configuration that
// run_gemm would pick for `problem` on the current device, e.g.
// "mma_sync 256x128x32 warp 64x64 stages 3 (A row-major, B row-major, 16-byte loads)".
std::string describe_gemm(const GemmProblem& problem, Precision precision);

}  // namespace pygpukit
