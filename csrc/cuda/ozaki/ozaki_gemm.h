// The FP32-accurate product (precision "fp32") by the Ozaki scheme II on
// INT8 tensor cores: what the dispatcher calls (dispatch.cu).
#pragma once

#include <cstddef>
#include <string>

#include <cuda_runtime.h>

#include "cuda/gemm_problem.h"

namespace pygpukit {

// Whether this build and a device of compute capability cc_major.cc_minor
// can run `p` this way: the INT8 wgmma kernel (sm_90a) built, K small
// enough for the moduli (ozaki::moduli_needed), and sizes within the
// kernels' 32-bit grid and TMA coordinates.
bool ozaki_runs(const GemmProblem& p, int cc_major, int cc_minor);

// Device scratch memory of run_ozaki_gemm: the rows' exponents and the
// residue planes of A, B and C for the most moduli K can need.
size_t ozaki_workspace_bytes(const GemmProblem& p);

// Runs `p` (ozaki_runs true) on `stream`: row statistics, residues, one
// INT8 GEMM per modulus, reconstruction with the epilogue.
cudaError_t run_ozaki_gemm(const GemmProblem& p, void* workspace, size_t workspace_bytes,
                           cudaStream_t stream);

std::string describe_ozaki(const GemmProblem& p);

}  // namespace pygpukit
