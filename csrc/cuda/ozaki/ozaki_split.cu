// The first two steps of the FP32-accurate product: each row's statistics
// (row_stats_kernel), then its scaled integers' residues (split_kernel).
#include "cuda/ozaki/ozaki_kernels.h"

#include <type_traits>

#include "cuda/common/int_math.h"
#include "cuda/common/ptx.cuh"
#include "cuda/launch_util.h"

namespace pygpukit::ozaki {
namespace {

constexpr int kStatsThreads = 256;

// Block of 256 threads: kRows rows of batch entry blockIdx.z, kLanes = 256 /
// kRows threads per row summing k = lane, lane + kLanes, ... in double (a
// float's square cannot overflow or underflow a double). Rows whose K is
// contiguous (A's rows, a column-major B's columns) take a warp each, 32
// adjacent values per load; rows that lie side by side (a row-major B's
// columns) take 32 per block, consecutive threads on consecutive rows.
template <bool kContiguousK>
struct StatsShape {
  static constexpr int kRows = kContiguousK ? kStatsThreads / 32 : 32;
  static constexpr int kLanes = kStatsThreads / kRows;
  __device__ static int row(int t) { return kContiguousK ? t / kLanes : t % kRows; }
  __device__ static int lane(int t) { return kContiguousK ? t % kLanes : t / kRows; }
};

// The kOutliers largest magnitudes seen, in descending order.
constexpr int kOutliers = 8;
struct Largest {
  float v[kOutliers] = {};
  __device__ void add(float x) {
    if (!(x > v[kOutliers - 1])) return;
#pragma unroll
    for (int i = kOutliers - 1; i > 0; --i) v[i] = x > v[i - 1] ? v[i - 1] : (x > v[i] ? x : v[i]);
    v[0] = fmaxf(v[0], x);
  }
};

template <bool kContiguousK>
__global__ void __launch_bounds__(kStatsThreads) row_stats_kernel(const Rows rows, int side, int32_t* exponents,
                                                                  DeviceSpread* spread) {
  using Shape = StatsShape<kContiguousK>;
  constexpr int kRows = Shape::kRows, kLanes = Shape::kLanes;
  ptx::programmatic_launch_start();
  __shared__ double sum1[kLanes][kRows], sum2[kLanes][kRows];
  __shared__ Largest largest[kLanes][kRows];
  __shared__ int64_t nonzeros[kLanes][kRows];  // -1: the row holds Inf or NaN
  const int r = Shape::row(threadIdx.x), q = Shape::lane(threadIdx.x);
  const int64_t row = int64_t(blockIdx.x) * kRows + r, b = blockIdx.z;
  double s1 = 0.0, s2 = 0.0;
  Largest top;
  int64_t nnz = 0;
  bool bad = false;
  if (row < rows.rows)
    for (int64_t k = q; k < rows.K; k += kLanes) {
      const float x = rows.at(b, row, k);
      if (!isfinite(x)) {
        bad = true;
        continue;
      }
      const double d = x;
      s1 += fabs(d);
      s2 = fma(d, d, s2);
      top.add(fabsf(x));
      nnz += x != 0.0f;
    }
  sum1[q][r] = s1;
  sum2[q][r] = s2;
  largest[q][r] = top;
  nonzeros[q][r] = bad ? -1 : nnz;
  __syncthreads();
  if (q != 0 || row >= rows.rows) return;
  for (int i = 1; i < kLanes; ++i) {
    s1 += sum1[i][r];
    s2 += sum2[i][r];
#pragma unroll
    for (int j = 0; j < kOutliers; ++j) top.add(largest[i][r].v[j]);
    bad |= nonzeros[i][r] < 0;
    nnz += nonzeros[i][r];
  }
  exponents[b * rows.rows + row] = bad ? kNonFiniteRow : norm_exponent(s2);
  if (bad || !(s1 > 0.0)) return;
  // Positive doubles order as their bits.
  const double ratio = s2 / (s1 * s1);
  atomicMax(&spread->rho, static_cast<unsigned long long>(__double_as_longlong(ratio)));
  // tau: the largest entry against the mean of the entries other than the
  // kOutliers largest, so that a few outlier channels do not hide each
  // other; huge where those entries vanish next to it, 1 where there are
  // none.
  double outliers = 0.0;
#pragma unroll
  for (int j = 0; j < kOutliers; ++j) outliers += top.v[j];
  const double rest = s1 - outliers;
  const double tau = nnz <= kOutliers ? 1.0
                     : rest > 0.0     ? double(top.v[0]) * double(nnz - kOutliers) / rest
                                      : 1e300;
  atomicMax(&spread->tau[side], static_cast<unsigned long long>(__double_as_longlong(tau)));
}

constexpr int kSplitRows = 32, kSplitK = 128, kSplitThreads = 256;
constexpr int kSplitChunk = 16;  // values per thread and plane: one 16-byte store

// Block: rows r0..r0+31 by k0..k0+127 of batch entry blockIdx.z, staged in
// shared memory (read along whichever of rows and K is contiguous), then
// thread (r, c) scales k0 + 16c .. + 15 of row r and stores their residues,
// 16 bytes per plane.
__global__ void __launch_bounds__(kSplitThreads) split_kernel(
    const Rows rows, const int32_t* exponents, const DeviceSpread* spread, int n_max, int8_t* residues,
    int64_t ld, int* count) {
  ptx::programmatic_launch_start();
  __shared__ float tile[kSplitRows][kSplitK + 1];
  const int64_t r0 = int64_t(blockIdx.y) * kSplitRows, k0 = int64_t(blockIdx.x) * kSplitK;
  const int64_t b = blockIdx.z;
  const bool k_contiguous = rows.stride_k == 1;
  for (int i = threadIdx.x; i < kSplitRows * kSplitK; i += kSplitThreads) {
    const int r = k_contiguous ? i / kSplitK : i % kSplitRows;
    const int k = k_contiguous ? i % kSplitK : i / kSplitRows;
    const bool inside = r0 + r < rows.rows && k0 + k < rows.K;
    tile[r][k] = inside ? rows.at(b, r0 + r, k0 + k) : 0.0f;
  }
  const Moduli& moduli = device_tables.moduli;
  const int needed = moduli_needed(moduli, spread->read(), rows.K);
  const int n = min(needed, n_max);
  if (count != nullptr && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x == 0)
    *count = needed;
  __syncthreads();
  const int r = threadIdx.x / (kSplitK / kSplitChunk), c = threadIdx.x % (kSplitK / kSplitChunk);
  const int64_t row = r0 + r, k = k0 + c * kSplitChunk;
  if (row >= rows.rows || k >= ld) return;
  const int e = exponents[b * rows.rows + row];
  // 2^mu, mu = h - e: the row's norm scaled below 2^h (ozaki_scheme.h).
  const bool finite = e != kNonFiniteRow && e != kZeroRow;
  const double scale = finite ? pow2(moduli.h[n] - e) : 0.0;
  double x[kSplitChunk];
#pragma unroll
  for (int i = 0; i < kSplitChunk; ++i) {
    const float v = tile[r][c * kSplitChunk + i];
    x[i] = isfinite(v) ? trunc(double(v) * scale) : 0.0;
  }
  int8_t* out = residues + (b * rows.rows + row) * ld + k;
  const int64_t plane = rows.batch * rows.rows * ld;
  for (int l = 0; l < n; ++l) {
    uint32_t word[kSplitChunk / 4];
#pragma unroll
    for (int w = 0; w < kSplitChunk / 4; ++w) {
      word[w] = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        word[w] |= uint32_t(uint8_t(residue(x[4 * w + j], moduli.p[l], moduli.p_inv[l]))) << (8 * j);
    }
    *reinterpret_cast<uint4*>(out + l * plane) = make_uint4(word[0], word[1], word[2], word[3]);
  }
}

}  // namespace

cudaError_t launch_row_stats(const Rows& rows, int side, int32_t* exponents, DeviceSpread* spread,
                             cudaStream_t stream) {
  auto launch = [&](auto contiguous) {
    constexpr bool kContiguousK = decltype(contiguous)::value;
    const dim3 grid(unsigned(ceil_div(rows.rows, StatsShape<kContiguousK>::kRows)), 1, unsigned(rows.batch));
    return launch_kernel<row_stats_kernel<kContiguousK>>(grid, dim3(kStatsThreads), KernelNeeds{}, stream, rows,
                                                         side, exponents, spread);
  };
  return rows.stride_k == 1 ? launch(std::true_type{}) : launch(std::false_type{});
}

static_assert(kMaxRows == int64_t{65535} * kSplitRows, "kMaxRows is the split's grid limit");

cudaError_t launch_split(const Rows& rows, const int32_t* exponents, const DeviceSpread* spread,
                         int n_max, int8_t* residues, int64_t ld, int* count, cudaStream_t stream) {
  const dim3 grid(unsigned(ceil_div(ld, kSplitK)), unsigned(ceil_div(rows.rows, kSplitRows)),
                  unsigned(rows.batch));
  return launch_kernel<split_kernel>(grid, dim3(kSplitThreads), KernelNeeds{}, stream, rows, exponents,
                                     spread, n_max, residues, ld, count);
}

}  // namespace pygpukit::ozaki
