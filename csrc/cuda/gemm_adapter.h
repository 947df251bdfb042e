// The ATen side of every CUDA operator: tensors described as GEMM operands
// (pointers, leading dimensions, layouts) without copying where the strides
// allow, and the one place a GemmProblem is run and its launch error checked.
// The operators' adapters (matmul_tf32_cuda.cpp, linear_tf32_cuda.cpp) only
// decide shapes; this file and they are the only ones that know at::Tensor.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

#include "cuda/gemm_problem.h"

namespace pygpukit {

// One operand as the kernel sees it. `storage` keeps alive a copy we had to
// make (when neither row- nor column-major), for as long as the launch needs
// the pointer; the stream-ordered caching allocator makes that safe.
struct Operand {
  const float* ptr = nullptr;
  int64_t ld = 0;
  Layout layout = Layout::kRowMajor;
  int64_t batch_stride = 0;
  at::Tensor storage;
};

// Describes the float32 matrices x[*batch, R, C] without copying when they
// are row-major (unit column stride) or column-major (unit row stride) and
// the batch dimensions flatten into one stride (0 when there are none or
// they are broadcast), as cuBLAS callers do (ATen's
// prepare_matrix_for_cublas). Anything else is copied once, contiguously.
Operand describe(const at::Tensor& x);

// Sets p's A and B fields from two described operands.
void set_operands(GemmProblem& p, const Operand& A, const Operand& B);

// Runs p on the current device and stream (the caller holds the device
// guard); throws c10::Error naming `op` and the kernel if the launch fails.
void run_gemm_checked(const GemmProblem& p, Precision precision, const char* op);

}  // namespace pygpukit
