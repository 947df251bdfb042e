// The kernels of the FP32-accurate product (ozaki_scheme.h), in the order
// run_ozaki_gemm launches them; ozaki_gemm.cu says how they fit together.
#pragma once

#include <cstdint>

#include <cuda.h>
#include <cuda_runtime.h>

#include "cuda/gemm_problem.h"
#include "cuda/ozaki/ozaki_scheme.h"

namespace pygpukit::ozaki {

// Rows of length K to scale and split: A's rows, or B's columns. Element
// (b, r, k) lies at data[b * batch_stride + r * stride_row + k * stride_k];
// batch_stride 0 broadcasts one matrix (then batch is 1).
struct Rows {
  const float* data = nullptr;
  int64_t rows = 0, K = 0, stride_row = 0, stride_k = 0, batch = 1, batch_stride = 0;
  __host__ __device__ float at(int64_t b, int64_t r, int64_t k) const {
    return data[b * batch_stride + r * stride_row + k * stride_k];
  }
};

// norm_exponent's value for a row holding Inf or NaN: its products are
// computed from the inputs instead (reconstruct_kernel).
inline constexpr int kNonFiniteRow = -200000;

// Spread (ozaki_scheme.h) as the statistics kernels raise it: positive
// doubles' bits, which order as the doubles, for atomicMax; zeroed before.
struct DeviceSpread {
  unsigned long long rho;     // over A's rows and B's columns
  unsigned long long tau[2];  // A's rows, B's columns
  __device__ Spread read() const {
    const double ta = __longlong_as_double(static_cast<long long>(tau[0]));
    const double tb = __longlong_as_double(static_cast<long long>(tau[1]));
    return Spread{__longlong_as_double(static_cast<long long>(rho)), ta < tb ? ta : tb};
  }
};

// Per row: its norm exponent (norm_exponent, kZeroRow or kNonFiniteRow) in
// exponents[b * rows + r]; rho and tau[side] (0 for A, 1 for B) raised in
// *spread.
cudaError_t launch_row_stats(const Rows& rows, int side, int32_t* exponents, DeviceSpread* spread,
                             cudaStream_t stream);

// The most rows launch_split takes: 65535 blocks of 32 rows.
inline constexpr int64_t kMaxRows = int64_t{65535} * 32;

// Residue planes: n_max planes of int8 [batch][rows][ld], plane l holding the
// rows' scaled integers modulo kModuli[l] (ld a multiple of 16, K <= ld;
// columns past K are zero). Writes the first n planes, n = moduli_needed
// of *spread and K (at most n_max), and with `count` non-null stores
// moduli_needed there: more than n_max where the moduli cannot reach FP32's
// accuracy, and then the GEMM does nothing and the reconstruction computes
// every product from the inputs.
cudaError_t launch_split(const Rows& rows, const int32_t* exponents, const DeviceSpread* spread,
                         int n_max, int8_t* residues, int64_t ld, int* count, cudaStream_t stream);

// The INT8 products of A's and B's residue planes (both [.][rows][ld]
// K-major), one per modulus l < *count: C's residues, int8 [n_max][batch][M][ldc].
struct Int8Gemm {
  int64_t M = 0, N = 0, K = 0, ld = 0;
  int batch = 1, batch_a = 1, batch_b = 1;  // batch_a / batch_b: 1 where broadcast
  int n_max = 0;
  const int8_t* a = nullptr;
  const int8_t* b = nullptr;
  int8_t* c = nullptr;
  int64_t ldc = 0;
  const int* count = nullptr;
};
bool int8_gemm_available();
cudaError_t launch_int8_gemm(const Int8Gemm& g, cudaStream_t stream);

// C = epilogue(A' B' scaled back), from C's residue planes (Int8Gemm's c)
// and the exponents of A's rows and B's columns; products of rows or
// columns holding Inf or NaN, and every product where *count > n_max, are
// computed from a and b.
struct Reconstruct {
  Rows a, b;  // as given to launch_row_stats
  const int32_t* exponents_a = nullptr;
  const int32_t* exponents_b = nullptr;
  const int8_t* residues = nullptr;
  int64_t ld_residues = 0;
  const int* count = nullptr;
  float* c = nullptr;
  int64_t ldc = 0, batch_stride_c = 0;
  int64_t M = 0, N = 0;
  int batch = 1, n_max = 0;
  Epilogue epilogue;
};
cudaError_t launch_reconstruct(const Reconstruct& r, cudaStream_t stream);

}  // namespace pygpukit::ozaki
