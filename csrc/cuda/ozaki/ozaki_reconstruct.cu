// The last step of the FP32-accurate product: C = epilogue(A' B' scaled
// back), each element recovered exactly from its residues by the Chinese
// remainder theorem and rounded once.
#include "cuda/ozaki/ozaki_kernels.h"

#include "cuda/common/epilogue.cuh"
#include "cuda/common/int_math.h"
#include "cuda/common/ptx.cuh"
#include "cuda/launch_util.h"

namespace pygpukit::ozaki {
namespace {

constexpr int kColumnsPerThread = 4;  // one 4-byte load per plane
constexpr int kBlockX = 64, kBlockY = 4;
// Row steps per block: each block builds its y table once for this many
// steps of kBlockY rows.
constexpr int kRowSteps = 16;

// y_l = (r W_l^-1) mod p_l in [-128, 127] for each residue r of modulus l,
// at [l][r + 128]: one shared-memory load per residue instead of a product
// and a reduction.
using YTable = int8_t[kMaxModuli][256];

// The integer C' from its n residues r_l (int8, modulo p_l), as a double:
// C' = sum_l W_l y_l - q P with q = round(sum_l y_l / p_l), exact in float
// because |C'| < P / 8 keeps the sum at least 3/8 from a half-integer while
// float's error is below n 2^-24. High and low parts are summed apart,
// each exactly (Crt), and added once: C' rounded to nearest for up to 11
// moduli.
__device__ double crt_value(const int (&r)[kMaxModuli], int n, const YTable& y_table, const Crt& crt,
                            const Moduli& moduli) {
  double high = 0.0, low = 0.0;
  float fraction = 0.0f;
#pragma unroll
  for (int l = 0; l < kMaxModuli; ++l) {
    if (l >= n) break;
    const double y = y_table[l][r[l] + 128];
    fraction = fmaf(float(y), float(moduli.p_inv[l]), fraction);
    high = fma(y, crt.weight_high[l], high);
    low = fma(y, crt.weight_low[l], low);
  }
  const double q = __float2int_rn(fraction);
  return fma(-q, crt.product_high, high) + fma(-q, crt.product_low, low);
}

// The product of a row of A with a column of B when either holds Inf or
// NaN: NaN if any term is NaN (Inf * 0 included) or terms of both infinite
// signs occur, else the infinity they share.
__device__ float nonfinite_product(const Rows& a, const Rows& b, int64_t batch, int64_t row, int64_t col) {
  bool nan = false, positive = false, negative = false;
  const int64_t ba = a.batch > 1 ? batch : 0, bb = b.batch > 1 ? batch : 0;
  for (int64_t k = 0; k < a.K; ++k) {
    const float t = a.at(ba, row, k) * b.at(bb, col, k);
    nan |= isnan(t);
    positive |= t == INFINITY;
    negative |= t == -INFINITY;
  }
  if (nan || (positive && negative) || !(positive || negative)) return NAN;
  return positive ? INFINITY : -INFINITY;
}

// The product of a row of A with a column of B summed in double (each
// float product exact there), rounded once: where the inputs' spread needs
// more moduli than there are (ozaki_kernels.h), far slower than the scheme
// but more accurate than FP32.
__device__ float product_in_double(const Rows& a, const Rows& b, int64_t batch, int64_t row, int64_t col) {
  const int64_t ba = a.batch > 1 ? batch : 0, bb = b.batch > 1 ? batch : 0;
  double sum = 0.0;
  for (int64_t k = 0; k < a.K; ++k) sum = fma(double(a.at(ba, row, k)), double(b.at(bb, col, k)), sum);
  return __double2float_rn(sum);
}

// Thread: columns 4x .. 4x + 3 of one row per step of a grid-stride loop
// over rows, batch entry blockIdx.z.
__global__ void __launch_bounds__(kBlockX * kBlockY) reconstruct_kernel(const Reconstruct p) {
  ptx::programmatic_launch_start();
  const bool from_inputs = *p.count > p.n_max;  // the moduli cannot reach FP32's accuracy
  const int n = min(*p.count, p.n_max);
  const Moduli& moduli = device_tables.moduli;
  const Crt& crt = device_tables.crt[n];
  const int h = moduli.h[n];
  __shared__ YTable y_table;
  for (int i = threadIdx.y * kBlockX + threadIdx.x; i < n * 256; i += kBlockX * kBlockY) {
    const int l = i / 256, r = i % 256 - 128;
    y_table[l][i % 256] = int8_t(residue(double(r * crt.weight_inverse[l]), moduli.p[l], moduli.p_inv[l]));
  }
  __syncthreads();
  const int64_t b = blockIdx.z;
  const int64_t col0 = (int64_t(blockIdx.x) * kBlockX + threadIdx.x) * kColumnsPerThread;
  if (col0 >= p.N) return;
  const int64_t plane = int64_t(p.batch) * p.M * p.ld_residues;
  const int64_t bb = p.b.batch > 1 ? b : 0, ba = p.a.batch > 1 ? b : 0;
  int eb[kColumnsPerThread];
#pragma unroll
  for (int j = 0; j < kColumnsPerThread; ++j)
    eb[j] = col0 + j < p.N ? p.exponents_b[bb * p.N + col0 + j] : kZeroRow;
  for (int64_t row = int64_t(blockIdx.y) * kBlockY + threadIdx.y; row < p.M; row += int64_t(gridDim.y) * kBlockY) {
    const int ea = p.exponents_a[ba * p.M + row];
    const int8_t* res = p.residues + (b * p.M + row) * p.ld_residues + col0;
    // Unrolled over every modulus, so that r stays in registers.
    int r[kColumnsPerThread][kMaxModuli];
#pragma unroll
    for (int l = 0; l < kMaxModuli; ++l) {
      if (l >= n) break;
      const char4 v = *reinterpret_cast<const char4*>(res + l * plane);
      r[0][l] = v.x;
      r[1][l] = v.y;
      r[2][l] = v.z;
      r[3][l] = v.w;
    }
    float* out = p.c + b * p.batch_stride_c + row * p.ldc;
#pragma unroll
    for (int j = 0; j < kColumnsPerThread; ++j) {
      const int64_t col = col0 + j;
      if (col >= p.N) break;
      float value;
      if (ea == kNonFiniteRow || eb[j] == kNonFiniteRow) {
        value = nonfinite_product(p.a, p.b, b, row, col);
      } else if (ea == kZeroRow || eb[j] == kZeroRow) {
        value = 0.0f;
      } else if (from_inputs) {
        value = product_in_double(p.a, p.b, b, row, col);
      } else {
        // C = C' 2^(-mu - nu), mu = h - ea, nu = h - eb.
        value = __double2float_rn(ldexp(crt_value(r[j], n, y_table, crt, moduli), ea + eb[j] - 2 * h));
      }
      out[col] = epilogue_value(p.epilogue, value, col);
    }
  }
}

}  // namespace

cudaError_t launch_reconstruct(const Reconstruct& r, cudaStream_t stream) {
  const dim3 grid(unsigned(ceil_div(ceil_div(r.N, kColumnsPerThread), kBlockX)),
                  unsigned(std::min<int64_t>(ceil_div(r.M, int64_t{kBlockY} * kRowSteps), 65535)),
                  unsigned(r.batch));
  return launch_kernel<reconstruct_kernel>(grid, dim3(kBlockX, kBlockY), KernelNeeds{}, stream, r);
}

}  // namespace pygpukit::ozaki
