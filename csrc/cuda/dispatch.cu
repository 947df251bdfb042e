// The one place that decides which kernel and tile configuration runs a GEMM
// (precision, device, shape, layout, alignment), and runs it.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda/decode/few_rows.cuh"
#include "cuda/simt/fma_gemm.h"
#include "cuda/gemm_problem.h"
#include "cuda/decode/gemv_kmajor.h"
#include "cuda/decode/gemv_kmajor_rows.h"
#include "cuda/decode/gemv_rowmajor.h"
#include "cuda/common/int_math.h"
#include "cuda/launch_util.h"
#include "cuda/mma_sync/mma_sync_config.h"
#include "cuda/common/pack_kmajor.h"
#include "cuda/decode/skinny_gemm.h"
#include "cuda/common/splitk_reduce.h"
#include "cuda/hopper/tensor_map.h"
#include "cuda/hopper/wgmma_config.h"
#include "cuda/ozaki/ozaki_gemm.h"

namespace pygpukit {
namespace {

struct DeviceInfo {
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  int smem_per_block_optin = 0;  // bytes of dynamic shared memory a block may use
  int smem_per_sm = 0;           // bytes of shared memory per SM
};

constexpr int kMaxDevices = 64;

// Read once per device: cudaDeviceGetAttribute is cheap but not free, and
// these never change for the life of the process.
const DeviceInfo& device_info(int device) {
  auto read = [](DeviceInfo& d, int device) {
    cudaDeviceGetAttribute(&d.sm_count, cudaDevAttrMultiProcessorCount, device);
    cudaDeviceGetAttribute(&d.cc_major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&d.cc_minor, cudaDevAttrComputeCapabilityMinor, device);
    cudaDeviceGetAttribute(&d.smem_per_block_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                           device);
    cudaDeviceGetAttribute(&d.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
  };
  if (device < 0 || device >= kMaxDevices) {  // past the cache: read on every call
    thread_local DeviceInfo uncached;
    uncached = DeviceInfo{};
    read(uncached, device);
    return uncached;
  }
  static std::array<std::once_flag, kMaxDevices> once;
  static std::array<DeviceInfo, kMaxDevices> info;
  std::call_once(once[device], [&] { read(info[device], device); });
  return info[device];
}

// Every kernel and tile configuration the dispatcher can choose. Each has
// exactly one row in the kernel table (KernelTable, below), in this order.
enum class Kernel {
  kWgmmaLarge, kWgmmaLargeSwapAB, kWgmmaSquare, kWgmmaMedium, kWgmmaMediumSwapAB, kWgmmaNarrow,
  kWgmmaNarrowSwapAB, kWgmmaMediumSwapABRing,
  kWgmmaPromotedLarge, kWgmmaPromotedMedium,
  kWgmmaSplit3SwapAB, kWgmmaSplit3SwapABKMajor,
  kWgmmaSplit3SwapABNarrow, kWgmmaSplit3SwapABKMajorNarrow,
  kMmaSyncLarge, kMmaSyncMedium, kMmaSyncSmall, kMmaSyncPromoted, kMmaSyncCompact,
  kMmaSyncPromotedCompact,
  kSkinny, kSkinnyWide, kGemvKMajor, kGemvKMajorRows, kGemvRowMajor,
  kFmaLarge, kFmaSmall,
  kCount
};

struct Choice {
  Kernel kernel;
  bool vec16 = false;  // 16-byte loads (mma_sync; always for skinny)
  int splits = 1;      // split-K ranges (wgmma, gemv_rowmajor, fma) or K-slices per output (gemv)
};

// 16-byte cp.async needs every chunk start 16-byte aligned: the base pointer,
// the leading dimension and the batch stride (in floats) all multiples of 4.
bool aligned16(const float* ptr, int64_t ld, int64_t batch_stride) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && ld % 4 == 0 && batch_stride % 4 == 0;
}

template <class Config>
bool fits(const GemmProblem& p, const DeviceInfo& d) {
  return d.smem_per_block_optin >= mma_sync_smem_bytes<Config>(p.layout_a, p.layout_b);
}

// Whether `Config` fits the device's shared memory and gives every SM at
// least one threadblock.
template <class Config>
bool fits_and_fills(const GemmProblem& p, const DeviceInfo& d) {
  return fits<Config>(p, d) && Config::tiles(p.M, p.N) * p.batch >= d.sm_count;
}

// Whether this build holds the sm_90a kernel and the device can run it
// (exactly compute capability 9.0: sm_90a code runs on nothing else).
bool wgmma_available(const DeviceInfo& d) {
#ifdef PYGPUKIT_HAS_SM90A
  return d.cc_major == 9 && d.cc_minor == 0 && d.smem_per_block_optin >= WgmmaLarge::kSmemBytes;
#else
  (void)d;
  return false;
#endif
}

// Whether the wgmma path can run `p` on this device: the kernels hand TMA
// their tile positions (row, column, k and batch index) as 32-bit signed
// coordinates, so a problem with M, N, K or batch of 2^31 or more (possible
// with expanded, stride-0 operands) goes to the mma.sync tiles, which index
// with int64. Past 2^31 the coordinates would wrap negative, and TMA would
// read zeros and drop stores there: a silently wrong result.
bool wgmma_runs(const GemmProblem& p, const DeviceInfo& d) {
  constexpr int64_t kMaxCoordinate = std::numeric_limits<int32_t>::max();
  return wgmma_available(d) && p.M <= kMaxCoordinate && p.N <= kMaxCoordinate &&
         p.K <= kMaxCoordinate && p.batch <= kMaxCoordinate;
}

// Below this many multiply-adds the wgmma path's fixed costs (tensor map
// encoding, possible packing and reduction launches) outweigh its speed.
constexpr int64_t kWgmmaMinMacs = int64_t{1} << 24;

// Multiply-adds of `p` per batch entry (times the batch count if
// `batched`), in double: M * N * K of expanded operands can pass 2^63,
// where int64 wrapped (2^64 to 0: "a small problem").
double macs(const GemmProblem& p, bool batched) {
  return double(p.M) * double(p.N) * double(p.K) * (batched ? double(p.batch) : 1.0);
}

// `Config` for `p`, with split-K when its output tiles alone would leave most
// SMs idle (decode-sized M, few large tiles), at least 4 k-tiles (128 of K)
// per split.
template <class Config>
Choice wgmma_choice(Kernel kernel, const GemmProblem& p, const DeviceInfo& d) {
  const int64_t blocks = Config::tiles(p.M, p.N) * p.batch;
  const int64_t k_tiles = ceil_div(p.K, Config::BK);
  int64_t splits = 1;
  if (p.batch == 1 && 2 * blocks <= d.sm_count)
    splits = std::min<int64_t>({d.sm_count / blocks, k_tiles / 4, 32});
  return {kernel, false, int(std::max<int64_t>(splits, 1))};
}

// The FP32 kernel for `p`: the 128x128 tile, or the 64x64 one where M or N
// is at most 64 (the large tile would compute mostly padding there). With
// fewer tiles than the GPU holds at once (`Config::kMinBlocksPerSM` CTAs on
// every SM), split-K: s ranges with s <= K / 256 and s <= 16 (one batch
// only: the partials hold one M x N output per range), s chosen for the
// least time by waves, ceil(s * tiles / held) / s (ties to fewer ranges),
// up to ceil(held / tiles), the first count that fills every slot: that
// count alone could spill a second wave (32 tiles, 264 held: 9 ranges, 288
// CTAs, against 8 ranges in one wave).
constexpr int64_t kFmaMaxSplits = 16, kFmaMinSplitK = 256;
template <class Config>
Choice fma_choice_of(Kernel kernel, const GemmProblem& p, const DeviceInfo& d) {
  // The kernel's ranges, round_up(ceil(K / s), BK) long, leave none empty:
  // (s - 1) * (K / s + BK) < K holds for K >= 256 s when (s - 1) BK < 256.
  static_assert((kFmaMaxSplits - 1) * Config::BK < kFmaMinSplitK, "a split-K range could be empty");
  const int64_t tiles = Config::tiles(p.M, p.N) * p.batch;
  const int64_t held = int64_t(Config::kMinBlocksPerSM) * d.sm_count;
  int64_t splits = 1;
  if (p.batch == 1 && tiles < held) {
    const int64_t most = std::min<int64_t>({ceil_div(held, tiles), p.K / kFmaMinSplitK, kFmaMaxSplits});
    for (int64_t s = 2; s <= most; ++s)  // waves(s) / s < waves(splits) / splits
      if (ceil_div(s * tiles, held) * splits < ceil_div(splits * tiles, held) * s) splits = s;
  }
  return {kernel, false, int(splits)};
}
Choice fma_choice(const GemmProblem& p, const DeviceInfo& d) {
  return p.M <= FmaSmall::BM || p.N <= FmaSmall::BN
             ? fma_choice_of<FmaSmall>(Kernel::kFmaSmall, p, d)
             : fma_choice_of<FmaLarge>(Kernel::kFmaLarge, p, d);
}

// Time of a 128x128 tile relative to a 128x256 one, each on a whole SM. On
// the H200: a wave of 128x256 tiles with K = 4096 took 100 us (4096^3, 4
// waves in 400 us), a wave of 128x128 tiles with K = 4099 took 54 us
// (4095x4097x4099, 8 waves in 430 us).
constexpr double kSquareTileCost = 0.55;

// Whether the persistent schedule of WgmmaSquare ends sooner than
// WgmmaLarge's: both run in waves of one cluster per two SMs, and a last wave
// that is mostly empty costs a whole tile time all the same. Only for
// problems with at least one full wave of 128x256 tiles: smaller ones are
// split along K instead (wgmma_choice).
bool square_tiles_finish_sooner(const GemmProblem& p, const DeviceInfo& d) {
  const int64_t slots = std::max(d.sm_count / 2, 1);
  const int64_t large = WgmmaLarge::cluster_tiles(p.M, p.N) * p.batch;
  const int64_t square = WgmmaSquare::cluster_tiles(p.M, p.N) * p.batch;
  auto waves = [slots](int64_t work) { return double(ceil_div(work, slots)); };
  return large >= slots && waves(square) * kSquareTileCost < waves(large);
}

// Whether a kSwapAB configuration can run `p` in place: TF32, A and B
// row-major (a plain `a @ b`) and both TMA-addressable. Where it can, it
// replaces the pack of B: WgmmaLargeSwapAB for M > 128 (H200, interleaved
// timing, 2026-12-01, time with the pack / time in place: 4096^3 1.13,
// 8192^3 1.04, 8192x14336x4096 1.04, 8192x4096x14336 1.04, 16384^3 1.02,
// 2048^3 1.16; relative error equal to the pack's, ratio 1.000 at 4096^3 to
// 8192^3), WgmmaMediumSwapAB for decode-sized M, where the pack reads and
// writes all of B once more (a 4096 x 4096 weight: 33 us, longer than the
// GEMM).
bool swap_ab_runs(const GemmProblem& p, Precision precision) {
  return precision == Precision::kTF32 && p.layout_a == Layout::kRowMajor &&
         p.layout_b == Layout::kRowMajor &&
         tma_compatible(p.A, p.M, p.lda, p.batch, p.batch_stride_a) &&
         tma_compatible(p.B, p.K, p.ldb, p.batch, p.batch_stride_b);
}

// The kSwapAB configuration for `p`: the narrow tile's 64 rows of C for
// M <= 64, Medium's 128 for M <= 128, Large's 256 above; its tiles run
// along N x M.
Choice swap_ab_choice(GemmProblem p, const DeviceInfo& d) {
  const int64_t m = p.M;
  std::swap(p.M, p.N);
  if (m <= WgmmaNarrowSwapAB::BN)
    return wgmma_choice<WgmmaNarrowSwapAB>(Kernel::kWgmmaNarrowSwapAB, p, d);
  if (m <= WgmmaMediumSwapAB::BN) {
    Choice c = wgmma_choice<WgmmaMediumSwapAB>(Kernel::kWgmmaMediumSwapAB, p, d);
    // Where K is not split, each block streams all of K: the weight's own
    // deeper ring (WgmmaMediumSwapABRing) keeps more of it in flight.
    if (c.splits == 1) c.kernel = Kernel::kWgmmaMediumSwapABRing;
    return c;
  }
  return wgmma_choice<WgmmaLargeSwapAB>(Kernel::kWgmmaLargeSwapAB, p, d);
}

// Whether WgmmaSplit3SwapAB (B row-major, as `x @ W` with W stored [in,
// out]) or WgmmaSplit3SwapABKMajor (B column-major, F.linear's weight [out,
// in]) can run `p`, 3xTF32 on unsplit operands (not a staged problem): M <=
// 128 (one tile of C's rows) and B TMA-addressable, read in place; A is
// packed per call, from either layout and at any alignment, into three
// parts of packed_ld(K) columns each: their TMA coordinates (int32) reach
// 3 packed_ld(K).
bool split3_swap_ab_runs(const GemmProblem& p, Precision precision) {
  static_assert(WgmmaSplit3SwapAB::BN == WgmmaSplit3SwapABKMajor::BN, "one limit on M");
  if (precision != Precision::kTF32x3 || p.split3_parts || p.M > WgmmaSplit3SwapAB::BN ||
      packed_cols(p.K, PackSplit::kPartsAligned) > std::numeric_limits<int32_t>::max())
    return false;
  return p.layout_b == Layout::kRowMajor
             ? tma_compatible(p.B, p.K, p.ldb, p.batch, p.batch_stride_b)
             : tma_compatible(p.B, p.N, p.ldb, p.batch, p.batch_stride_b);
}

// 3xTF32 takes the configurations that promote their accumulators: its
// point is FP32 accuracy, which one long tensor-core accumulation chain
// loses. Unsplit operands that WgmmaSplit3SwapAB runs go there (the weight
// read once, in place); the rest are staged problems (both operands packed
// as parts over 3K columns).
Choice choose_wgmma(const GemmProblem& p, Precision precision, const DeviceInfo& d) {
  if (split3_swap_ab_runs(p, precision)) {
    GemmProblem t = p;
    std::swap(t.M, t.N);
    const bool row_major = p.layout_b == Layout::kRowMajor;
    if (p.M <= WgmmaSplit3SwapABNarrow::BN)
      return row_major
                 ? wgmma_choice<WgmmaSplit3SwapABNarrow>(Kernel::kWgmmaSplit3SwapABNarrow, t, d)
                 : wgmma_choice<WgmmaSplit3SwapABKMajorNarrow>(
                       Kernel::kWgmmaSplit3SwapABKMajorNarrow, t, d);
    return row_major
               ? wgmma_choice<WgmmaSplit3SwapAB>(Kernel::kWgmmaSplit3SwapAB, t, d)
               : wgmma_choice<WgmmaSplit3SwapABKMajor>(Kernel::kWgmmaSplit3SwapABKMajor, t, d);
  }
  if (precision == Precision::kTF32x3)
    return p.M <= 128 ? wgmma_choice<WgmmaPromotedMedium>(Kernel::kWgmmaPromotedMedium, p, d)
                      : wgmma_choice<WgmmaPromotedLarge>(Kernel::kWgmmaPromotedLarge, p, d);
  if (p.M <= 128 && swap_ab_runs(p, precision)) return swap_ab_choice(p, d);
  if (p.M <= 64) return wgmma_choice<WgmmaNarrow>(Kernel::kWgmmaNarrow, p, d);
  if (p.M <= 128) return wgmma_choice<WgmmaMedium>(Kernel::kWgmmaMedium, p, d);
  if (square_tiles_finish_sooner(p, d)) return wgmma_choice<WgmmaSquare>(Kernel::kWgmmaSquare, p, d);
  if (swap_ab_runs(p, precision)) return swap_ab_choice(p, d);
  return wgmma_choice<WgmmaLarge>(Kernel::kWgmmaLarge, p, d);
}

// The problem as the skinny kernel reads it, both operands K-major: a single
// column of B described row-major (as the adapter describes matmul's vector
// b or a one-row weight) is column-major too when its K elements are
// contiguous: unit stride, or just one element.
GemmProblem kmajor_view(GemmProblem p) {
  if (p.N == 1 && p.layout_b == Layout::kRowMajor && (p.ldb == 1 || p.K == 1)) {
    p.layout_b = Layout::kColMajor;
    p.ldb = 0;
  }
  return p;
}

// Whether `p`'s operands are as the skinny kernel and the K-major GEMVs
// read them (skinny_gemm.h lists what they need): one batch entry, both
// K-major, 16-byte aligned.
bool skinny_operands(const GemmProblem& p) {
  const GemmProblem q = kmajor_view(p);
  return q.batch == 1 && q.layout_a == Layout::kRowMajor && q.layout_b == Layout::kColMajor &&
         aligned16(q.A, q.lda, 0) && aligned16(q.B, q.ldb, 0);
}

// Whether the skinny kernel can run `p`: up to kSkinnyMaxM rows of A (above
// 16 in blocks of 16).
bool skinny_runs(const GemmProblem& p) { return p.M <= kSkinnyMaxM && skinny_operands(p); }

// Whether the GEMV can run `p` (gemv_kmajor.h): one row of A, and the operand
// requirements of the skinny kernel.
bool gemv_kmajor_runs(const GemmProblem& p) { return p.M == 1 && skinny_operands(p); }

// Whether the row-major GEMV can run `p` (gemv_rowmajor.h): up to
// kGemvRowMajorMaxM rows of A (above kGemvRowMajorMaxRows in blocks, one
// pass over B each) and a row-major B, 16-byte aligned, as `x @ W` with W
// stored [in, out]; more than one row also needs A's rows 16-byte aligned.
bool gemv_rowmajor_runs(const GemmProblem& p) {
  return p.batch == 1 && p.M <= kGemvRowMajorMaxM && p.layout_a == Layout::kRowMajor &&
         p.layout_b == Layout::kRowMajor && aligned16(p.B, p.ldb, 0) &&
         (p.M == 1 || aligned16(p.A, p.lda, 0));
}

// The fewest K-slices per output, a power of two up to `max_slices`, that
// give `warps` warps (at one slice) at least `wanted` in all.
int fewest_slices(int64_t warps, int64_t wanted, int max_slices) {
  int slices = 1;
  while (slices < max_slices && warps * slices < wanted) slices *= 2;
  return slices;
}

// The GEMV for `p` with its K-slices per output: the fewest that give ~30
// warps per SM (8-warp CTAs of 52-58 registers, 4 of which fit an SM). H200,
// graph-timed at M = 1, K = 4096, 1 / 2 / 4 / 8 slices: N = 4096 18.1 /
// 21.3 / 23.7 / 23.7 us; N = 2048 12.0 / 11.4 / 12.8 / 14.1; N = 1024 10.0 /
// 8.6 / 7.3 / 8.1; N = 512 9.4 / 7.6 / 5.7 / 4.9 (2026-12-01). Within a row,
// more slices mean shorter streams, and at N >= 4096 one warp per row wins.
constexpr int64_t kGemvKMajorWarpsPerSm = 30;
Choice gemv_kmajor_choice(const GemmProblem& p, const DeviceInfo& d) {
  return {Kernel::kGemvKMajor, true,
          fewest_slices(p.N, kGemvKMajorWarpsPerSm * d.sm_count, kGemvKMajorMaxSlices)};
}

// Whether the few-rows GEMV can run `p` (gemv_kmajor_rows.h): 2 to 16 rows of A,
// and the operand requirements of the skinny kernel.
bool gemv_kmajor_rows_runs(const GemmProblem& p) {
  return p.M >= 2 && p.M <= kGemvKMajorRowsMaxRows && skinny_operands(p);
}

// The few-rows GEMV for `p` with its K-slices per output: the fewest that
// give every SM the warps its CTAs are built for (2 CTAs of 8) at
// kWeightRows outputs per warp.
Choice gemv_kmajor_rows_choice(const GemmProblem& p, const DeviceInfo& d) {
  using Cfg = GemvKMajorRowsConfig<kGemvKMajorRowsMaxRows>;  // every kRows: the same warps and outputs
  const int64_t warps = ceil_div(p.N, Cfg::kWeightRows);
  const int64_t warps_per_sm = int64_t{Cfg::kMinCtasPerSm} * Cfg::kWarps;
  return {Kernel::kGemvKMajorRows, true,
          fewest_slices(warps, warps_per_sm * d.sm_count, kGemvKMajorRowsMaxSlices)};
}

// The row-major GEMV for `p` with its K-splits: column blocks times splits
// filling the SMs once at the CTAs per SM its kernel for M rows is built
// for, every split at least one CTA step of rows. At N = K = 4096 on 132
// SMs, one row (4 CTAs per SM): 32 blocks x 16 splits of 256 rows; N =
// 14336: 112 x 4.
Choice gemv_rowmajor_choice(const GemmProblem& p, const DeviceInfo& d) {
  using Cfg = GemvRowMajorShape;
  const int64_t wave = int64_t{gemv_rowmajor_ctas_per_sm(rows_per_cta(p.M))} * d.sm_count;
  const int64_t wanted = std::max<int64_t>(
      std::min<int64_t>({wave / Cfg::col_blocks(p.N), p.K / Cfg::kRowsPerStep,
                         kGemvRowMajorMaxSplits}),
      1);
  // Whole CTA steps per split may leave fewer splits than wanted.
  const int64_t rows = Cfg::rows_per_split(p.K, int(wanted));
  return {Kernel::kGemvRowMajor, true, int(ceil_div(p.K, rows))};
}

// 2 to 16 rows of A on the CUDA cores (up to 64 on a row-major weight, in
// blocks of 16): the row-major GEMV for `x @ W`, the few-rows GEMV for a
// K-major weight (its layout first, as for one row).
bool few_rows_gemv_runs(const GemmProblem& p) {
  return p.M >= 2 && (gemv_rowmajor_runs(p) || gemv_kmajor_rows_runs(p));
}
Choice few_rows_gemv_choice(const GemmProblem& p, const DeviceInfo& d) {
  return gemv_rowmajor_runs(p) ? gemv_rowmajor_choice(p, d) : gemv_kmajor_rows_choice(p, d);
}

// Up to which M the automatic choice takes the few-rows GEMVs: where they
// beat what serves these rows otherwise. H200, 2026-12-01
// (benchmarks/experiments/bench_gemv_rows.py, final run, median us, weights N x K 4096x4096 /
// 14336x4096 / 4096x14336, GEMV vs the kernel it replaces):
// - row-major, 3xTF32 (W's parts packed per call; promoted wgmma forced):
//   22.0-58.3 vs 141-458 at M = 2, 40.1-123.9 vs 141-454 at M = 16;
// - row-major, TF32 (SwapAB wgmma): 1.01-1.21x faster at M = 2 to 8,
//   0.52-0.69x at M = 16; 2026-12-01, against the 64-row SwapAB tile:
//   1.09-1.17x at M = 4, 1.08-1.13x at 8, 0.54-0.69x at 16;
// - K-major, 3xTF32 (skinny, split in registers): 1.9-2.8x faster at M =
//   2 to 8, 0.72-0.89x at M = 16; 2026-12-01, after the skinny kernel's
//   split got cheaper (skinny_gemm.cu, mma_block): 1.5-1.65x at M = 2 and 4,
//   1.16-1.34x at 8, 0.45-0.56x at 16, so the limit stays;
// - K-major, TF32 (skinny): 1.07-1.13x at M = 2 and 4, 0.79-0.92x at M = 8;
// - either layout, FP32 ("ieee"): the FMA kernel took 498-1931 us, up to 31x
//   the GEMVs, 2.7x at the least (M = 16). The FMA kernel of 2026-12-03
//   (register-blocked, split-K) against the GEMVs, same weights: K-major,
//   M = 16, 1.43-1.81x the GEMV's time; row-major 2.29-2.91x at 16 rows,
//   1.16-1.46x at 32, 0.78-1.01x at 48, 0.60-0.76x at 64. So FP32 on a
//   row-major weight takes the GEMV up to 32 rows (kFp32RowMajorGemvMaxM).
// Above 16 rows the row-major GEMV runs blocks of 16, one pass over W each
// (2026-12-01, same weights, GEMV vs the staged 3xTF32 path / the FMA
// kernel): 32 rows 79-248 vs 140-450 / 532-1970 us, 48 rows 119-370 vs
// 141-450 / 541-1988, 64 rows 159-494 vs 142-454 / 547-2009. So 3xTF32
// takes it up to 48 rows (1.19-1.33x there), FP32 up to 64 (1.4-6.7x;
// 32 since the FMA kernel of 2026-12-03, above).
// Where the Hopper kernel that splits W in registers runs
// (benchmarks/experiments/bench_tf32x3_decode.py, WgmmaSplit3SwapABNarrow: 41.2 / 111 / 107 us at
// 16 rows, 42.7 / 113 / 112 at 32; WgmmaSplit3SwapAB: 61.7 / 198 / 177 at
// 128), 3xTF32 takes the GEMV up to 16 rows only (16 rows 39.6 / 123 /
// 113; 32 rows 80 / 252 / 233): the two are within 10% either way at 16
// rows, and below it the GEMV is well ahead (8 rows 25.1 / 63.2 / 62.5).
// The cost of a rows-per-CTA tier does not depend on M within it (rows past
// M do full work), so each limit is a tier's top. 3xTF32's packed parts
// (split3_parts: three products over 3K columns) compare as TF32 does.
// Measured on the H200 only.
static_assert(kGemvKMajorRowsMaxRows == kGemvRowMajorMaxRows, "both GEMVs compute up to 16 rows at once");
constexpr int64_t kFp32RowMajorGemvMaxM = 2 * kGemvRowMajorMaxRows;
int64_t few_rows_gemv_max_m(const GemmProblem& p, Precision precision, const DeviceInfo& d) {
  const bool row_major = gemv_rowmajor_runs(p);
  if (precision == Precision::kIEEE) return row_major ? kFp32RowMajorGemvMaxM : kGemvKMajorRowsMaxRows;
  const bool unsplit_tf32x3 = precision == Precision::kTF32x3 && !p.split3_parts;
  const bool split3_wgmma = wgmma_runs(p, d) && split3_swap_ab_runs(p, precision);
  if (row_major)
    return unsplit_tf32x3 ? (split3_wgmma ? 1 : 3) * kGemvRowMajorMaxRows : 8;
  return unsplit_tf32x3 ? 8 : 4;
}

// One row of A: the GEMV for the weight's layout, K-major or row-major.
bool single_row_runs(const GemmProblem& p) {
  return p.M == 1 && (gemv_kmajor_runs(p) || gemv_rowmajor_runs(p));
}
Choice single_row_choice(const GemmProblem& p, const DeviceInfo& d) {
  return gemv_kmajor_runs(p) ? gemv_kmajor_choice(p, d) : gemv_rowmajor_choice(p, d);
}

// The largest M the automatic choice gives the skinny kernel, which reads B
// once whatever M is: on the H200 at 4096 x 4096 it took 21-23 us at M = 1
// to 16 against the wgmma path's 44-45 us (2026-11-30: 64x256 tiles,
// split-K and a reduction pass).
// 3xTF32 keeps the same limit on Hopper: above it the kernel that splits W
// in registers (WgmmaSplit3SwapABKMajor(Narrow)) reads W once for all
// rows, where the skinny kernel's blocks of 16 rows (forced) re-read it per
// block. H200,
// benchmarks/experiments/bench_tf32x3_decode.py, weights 4096x4096 / 14336x4096 / 4096x14336,
// 2026-12-01, skinny vs wgmma: 16 rows 32.6 / 106 / 105 vs 41.9 / 115 /
// 114 us; 32 rows (two blocks) 65.1 / 213 / 219 vs 42.8 / 122 / 116; 64
// rows 130 / 444 / 439 vs 43.5 / 127 / 120.
constexpr int64_t kSkinnyAutoMaxM = 16;
static_assert(kSkinnyAutoMaxM <= SkinnyNarrow::kMaxM, "one block of rows");

// With the 64x128 wgmma tile (2026-12-01) the wgmma path catches up above
// M = 8 on large weights. H200, graph-timed device time (2026-12-01), skinny
// vs wgmma, 4096x4096 / 14336x4096 / 4096x14336: M = 8 21.6 vs 24.0, 68.0
// vs 67.5, 67.3 vs 64.5 us; M = 16 23.9 vs 24.1, 71.4 vs 67.6, 72.2 vs
// 65.1 us. So on Hopper TF32 with M above this and a weight larger than
// 4096 x 4096 takes the wgmma path. Smaller weights were not measured and
// keep the skinny kernel; 3xTF32 keeps it too (measured against the wgmma
// path that packs three copies of W per call; on 2026-12-01 the kernel that
// splits W in registers lost to it at 16 rows, see kSkinnyAutoMaxM).
constexpr int64_t kSkinnyOverWgmmaMaxM = 8;
constexpr int64_t kSkinnyOverWgmmaMaxWeight = int64_t{4096} * 4096;

// With fewer skinny CTAs than SMs (N < 16 x SMs), each CTA streams its 16
// columns over the whole of K while other SMs idle, so the skinny grid's
// time grows with K whatever N is; the wgmma path splits K over every SM at
// a fixed cost (split-K pass, launches) plus the weight's bytes at about
// the HBM rate. Fitted to graph-timed device times on the H200 (2026-12-02,
// 5 to 16 rows, skinny vs wgmma, us): TF32 at 8 rows, K -> N 1024 ->
// 2048 5.4 vs 8.6, 2048 -> 1024 7.3 vs 8.6, 4096 -> 2048 14.7 vs 15.1,
// 4096 -> 1024 12.7 vs 10.9, 8192 -> 1024 23.1 vs 15.0, 14336 -> 2048
// 44.7 vs 34.0; 3xTF32 (both splitting in registers) at 16 rows: 4096 ->
// 1024 17.7 vs 18.7, 4096 -> 2048 18.7 vs 23.7, 8192 -> 1024 32.6 vs 24.8,
// 14336 -> 2048 56.6 vs 53.5. On an H100 (less bandwidth: the wgmma path
// slower) the crossing lies at larger K: TF32 4096 -> 1024 12.7 vs 12.6,
// 3072 -> 1024 10.3 vs 11.3. Above K = 8192 the skinny grid fell behind
// its fit, so the wgmma path takes it whatever the fit says.
struct UnderfilledCost {
  double skinny_us, skinny_us_per_k, wgmma_us, wgmma_us_per_weight_mb;
};
constexpr UnderfilledCost kUnderfilledTF32{2.5, 2.6e-3, 6.5, 0.227};
constexpr UnderfilledCost kUnderfilledTF32x3{2.8, 3.6e-3, 12.6, 0.36};
constexpr int64_t kSkinnyUnderfilledMaxK = 8192;

// Whether the skinny kernel's grid, fewer CTAs than SMs, is expected to end
// sooner than the wgmma path on `p` (UnderfilledCost).
bool skinny_underfilled_faster(const GemmProblem& p, Precision precision) {
  if (p.K > kSkinnyUnderfilledMaxK) return false;
  const UnderfilledCost& c = precision == Precision::kTF32 ? kUnderfilledTF32 : kUnderfilledTF32x3;
  const double weight_mb = 4e-6 * double(p.N) * double(p.K);
  return c.skinny_us + c.skinny_us_per_k * double(p.K) <= c.wgmma_us + c.wgmma_us_per_weight_mb * weight_mb;
}

// Whether the automatic choice takes the skinny kernel for `p`, which it
// can run. Off Hopper the alternative (mma.sync tiles, no split-K) has no
// more CTAs than skinny, so skinny always.
bool skinny_preferred(const GemmProblem& p, Precision precision, const DeviceInfo& d) {
  if (p.M > kSkinnyAutoMaxM) return false;
  if (!wgmma_runs(p, d)) return true;
  if (precision == Precision::kTF32 && p.M > kSkinnyOverWgmmaMaxM &&
      p.N * p.K > kSkinnyOverWgmmaMaxWeight)
    return false;
  if (SkinnyNarrow::ctas(p.N) >= d.sm_count) return true;
  // The alternatives the cost model knows: the kernel that splits 3xTF32's
  // weight in registers (at any size), and the wgmma path on a TF32 product
  // (TF32, or 3xTF32's staged parts over 3K) from kWgmmaMinMacs up. The
  // others (packing the weight's parts per call; the mma.sync tiles, with
  // no more CTAs than skinny) lose to the skinny kernel.
  if (precision == Precision::kTF32x3 && !p.split3_parts)
    return !split3_swap_ab_runs(p, precision) || skinny_underfilled_faster(p, precision);
  if (macs(p, false) < kWgmmaMinMacs) return true;
  return skinny_underfilled_faster(p, Precision::kTF32);
}

// The skinny tile for `p`: the wide one (half of A's re-reads) when it
// still gives every SM two CTAs (see SkinnyWide), for TF32 only (3xTF32
// runs the narrow tile). Measured on the H200 only; GPUs whose SMs hold one
// 80 KB CTA (sm_86, sm_89: 100 KB) keep the narrow tile.
constexpr int kTwoSkinnyCtasSmem = 2 * (SkinnyWide::kSmemBytes + 1024);  // + 1 KB reserved per CTA
Choice skinny_choice(const GemmProblem& p, Precision precision, const DeviceInfo& d) {
  const bool wide = precision == Precision::kTF32 && d.smem_per_sm >= kTwoSkinnyCtasSmem &&
                    SkinnyWide::ctas(p.N) >= 2 * d.sm_count;
  return {wide ? Kernel::kSkinnyWide : Kernel::kSkinny, true};
}

// p.forced (settings.h) forces a kernel family or configuration, for tests
// and benchmarks. A forced kernel that cannot run the problem (wgmma off
// Hopper, wgmma_swap_ab where neither swap_ab_runs nor (3xTF32)
// split3_swap_ab_runs, large tile with unaligned operands, too little shared
// memory, skinny with M > 64 or an operand that is not K-major and 16-byte
// aligned, gemv where few_rows_gemv_runs and single_row_runs say no) falls
// back to the automatic choice rather than fail. With precision "ieee", any
// forced kernel but gemv runs the FMA one.
// For kTF32x3, `p` is the staged problem (3K columns of big and small parts),
// except in tf32x3_unstaged, which asks about the unsplit operands.
Choice choose(const GemmProblem& p, Precision precision, const DeviceInfo& d) {
  // mma.sync TF32 and the skinny kernel's cp.async need sm_80.
  if (d.cc_major < 8) return fma_choice(p, d);
  using F = ForcedKernel;
  const F forced = p.forced;
  // One row of A, any precision: the FP32 GEMV, unless another kernel is
  // forced. FP32 precision otherwise never uses tensor cores: the FMA kernel.
  const bool gemv = single_row_runs(p);
  if (gemv && (forced == F::kAuto || forced == F::kGemv)) return single_row_choice(p, d);
  // 2 to 16 rows of A (up to 64 on a row-major weight, in blocks): the
  // few-rows GEMVs, always when forced, unforced where they win
  // (few_rows_gemv_max_m).
  const bool few_rows_run = few_rows_gemv_runs(p);
  const bool few_rows = few_rows_run && p.M <= few_rows_gemv_max_m(p, precision, d);
  if (few_rows_run && (forced == F::kGemv || (forced == F::kAuto && few_rows)))
    return few_rows_gemv_choice(p, d);
  if (precision == Precision::kIEEE) return fma_choice(p, d);
  const bool vec16 = aligned16(p.A, p.lda, p.batch_stride_a) &&
                     aligned16(p.B, p.ldb, p.batch_stride_b);
  if (forced == F::kFma) return fma_choice(p, d);
  const bool wgmma = wgmma_runs(p, d);
  if (forced == F::kWgmma && wgmma) return choose_wgmma(p, precision, d);
  if (forced == F::kWgmmaSwapAB && wgmma && swap_ab_runs(p, precision)) return swap_ab_choice(p, d);
  if (forced == F::kWgmmaSwapAB && wgmma && split3_swap_ab_runs(p, precision))
    return choose_wgmma(p, precision, d);
  if (forced == F::kMmaSyncLarge && vec16 && fits<MmaSyncLarge>(p, d)) return {Kernel::kMmaSyncLarge, true};
  if (forced == F::kMmaSyncMedium && fits<MmaSyncMedium>(p, d)) return {Kernel::kMmaSyncMedium, vec16};
  if (forced == F::kMmaSyncSmall) return {Kernel::kMmaSyncSmall, vec16};
  // 3xTF32's staged operands (row-major A, column-major B, aligned): a
  // configuration that promotes its accumulators.
  const bool staged_tf32x3 = precision == Precision::kTF32x3 && vec16 && p.layout_a == Layout::kRowMajor &&
                             p.layout_b == Layout::kColMajor;
  if (forced == F::kMmaSyncCompact && fits<MmaSyncCompact>(p, d))
    return staged_tf32x3 ? Choice{Kernel::kMmaSyncPromotedCompact, true} : Choice{Kernel::kMmaSyncCompact, vec16};
  if (forced == F::kSkinny && skinny_runs(p)) return skinny_choice(p, precision, d);
  // From here on the automatic choice: unforced, or forced to a kernel that
  // cannot run `p`; "mma_sync" alone keeps to the mma.sync tiles.
  const bool automatic = forced != F::kMmaSync;
  if (automatic && gemv) return single_row_choice(p, d);
  if (automatic && few_rows) return few_rows_gemv_choice(p, d);
  // Decode-sized M on any sm_80+ GPU: B streamed once, no split-K pass.
  if (automatic && skinny_runs(p) && skinny_preferred(p, precision, d))
    return skinny_choice(p, precision, d);
  // 3xTF32 at decode-sized M on Hopper: the kernel that splits the weight
  // in registers, at any size (the alternative packs both operands too).
  if (automatic && wgmma && split3_swap_ab_runs(p, precision)) return choose_wgmma(p, precision, d);
  // On Hopper, wgmma for everything but small problems.
  if (automatic && wgmma && macs(p, true) >= kWgmmaMinMacs)
    return choose_wgmma(p, precision, d);
  // 3xTF32's staged operands on the mma.sync configurations that promote
  // their accumulators, the 3-stage one where the other does not fit.
  if (staged_tf32x3 && fits<MmaSyncPromoted>(p, d)) return {Kernel::kMmaSyncPromoted, true};
  if (staged_tf32x3 && fits<MmaSyncPromotedCompact>(p, d)) return {Kernel::kMmaSyncPromotedCompact, true};
  // The largest tile that still gives every SM work: larger tiles issue more
  // MMAs per fragment load and read less from L2 per FLOP. The large tile
  // has no 4-byte-load variant (MmaSyncBuilds::k16ByteLoads).
  if (vec16 && fits_and_fills<MmaSyncLarge>(p, d)) return {Kernel::kMmaSyncLarge, true};
  if (fits_and_fills<MmaSyncMedium>(p, d)) return {Kernel::kMmaSyncMedium, vec16};
  // Reached where MmaSyncMedium does not fit (its tile count is the same).
  if (fits_and_fills<MmaSyncCompact>(p, d)) return {Kernel::kMmaSyncCompact, vec16};
  return {Kernel::kMmaSyncSmall, vec16};
}

const char* layout_name(Layout l) { return l == Layout::kRowMajor ? "row-major" : "column-major"; }

int current_device() {
  int device = 0;
  cudaGetDevice(&device);
  return device;
}

// Operands that go through pack_kmajor into the workspace before the GEMM,
// and in what form: for the wgmma path, those TMA cannot read K-major in
// place (a transposed A or row-major B, a leading dimension or base pointer
// not 16-byte aligned); for 3xTF32, both, split into big and small parts.
struct Staging {
  bool pack_a = false, pack_b = false;
  PackSplit split_a = PackSplit::kNone, split_b = PackSplit::kNone;
  int64_t batch_a = 1, batch_b = 1;  // entries to pack: 1 for a broadcast operand
  size_t bytes_a = 0, bytes_b = 0;   // workspace bytes, each rounded up to 256
};

size_t workspace_round(int64_t floats) { return size_t(round_up(floats * 4, 256)); }

// `s` with its batch entries and workspace bytes filled in for `p`, from
// what it packs and how.
Staging sized_staging(Staging s, const GemmProblem& p) {
  s.batch_a = p.batch_stride_a == 0 ? 1 : p.batch;
  s.batch_b = p.batch_stride_b == 0 ? 1 : p.batch;
  if (s.pack_a) s.bytes_a = workspace_round(s.batch_a * p.M * packed_ld(packed_cols(p.K, s.split_a)));
  if (s.pack_b) s.bytes_b = workspace_round(s.batch_b * p.N * packed_ld(packed_cols(p.K, s.split_b)));
  return s;
}

Staging plan_staging(const GemmProblem& p, bool for_wgmma, bool tf32x3) {
  Staging s;
  s.pack_a = tf32x3 || (for_wgmma && !(p.layout_a == Layout::kRowMajor &&
                                       tma_compatible(p.A, p.M, p.lda, p.batch, p.batch_stride_a)));
  s.pack_b = tf32x3 || (for_wgmma && !(p.layout_b == Layout::kColMajor &&
                                       tma_compatible(p.B, p.N, p.ldb, p.batch, p.batch_stride_b)));
  if (tf32x3) {
    s.split_a = PackSplit::kSmallBigBig;
    s.split_b = PackSplit::kBigSmallBig;
  }
  return sized_staging(s, p);
}

// The problem on the staged operands: A row-major and B column-major (both
// K-major) in the workspace at `ws`, over 3K columns for 3xTF32 (whose
// splits give pack_a and pack_b the same column count). kPartsAligned's
// parts are read one by one by a kernel that keeps K.
GemmProblem staged_problem(GemmProblem p, const Staging& s, const uint8_t* ws) {
  if (s.pack_a) {
    p.A = reinterpret_cast<const float*>(ws);
    p.lda = packed_ld(packed_cols(p.K, s.split_a));
    p.layout_a = Layout::kRowMajor;
    p.batch_stride_a = s.batch_a == 1 ? 0 : p.M * p.lda;
  }
  if (s.pack_b) {
    p.B = reinterpret_cast<const float*>(ws + s.bytes_a);
    p.ldb = packed_ld(packed_cols(p.K, s.split_b));
    p.layout_b = Layout::kColMajor;
    p.batch_stride_b = s.batch_b == 1 ? 0 : p.N * p.ldb;
  }
  if (s.split_a == PackSplit::kPartsAligned) return p;
  p.K = packed_cols(p.K, s.split_a);
  p.split3_parts = s.split_a != PackSplit::kNone;
  return p;
}

// Launches the packs of `s` from the operands of `p` into `ws`.
cudaError_t launch_staging(const GemmProblem& p, const Staging& s, uint8_t* ws,
                           cudaStream_t stream) {
  cudaError_t err = cudaSuccess;
  if (s.pack_a)
    err = launch_pack_kmajor(p.A, p.layout_a == Layout::kRowMajor, p.lda, p.batch_stride_a, p.M,
                             p.K, s.batch_a, s.split_a, reinterpret_cast<float*>(ws), stream);
  if (s.pack_b && err == cudaSuccess)
    err = launch_pack_kmajor(p.B, p.layout_b == Layout::kColMajor, p.ldb, p.batch_stride_b, p.N,
                             p.K, s.batch_b, s.split_b,
                             reinterpret_cast<float*>(ws + s.bytes_a), stream);
  return err;
}

// What the wgmma configuration `Config` needs packed: nothing for the kSwapAB
// configurations, which read B in place (row-major, or K-major for the
// kSwapKMajor ones), except A's 3xTF32 parts for the WgmmaSplit3 ones.
// kPackOffSectorRows (WgmmaSquare's row) also packs K-major operands whose rows are off the 32-byte L2
// sectors (e.g. K = 4100; TMA needs only 16 bytes, and each 128-byte box row
// of such an operand touches five sectors instead of four): its mainloop,
// which loads the most operand bytes per MMA, took 10-22% longer on them
// than packs plus the GEMM on the packed rows (H200, 2026-12-02, nt, M x N x K: 4095 x 4097 x 4099 with rows of
// 4100 floats 640-659 -> 524-538 us, 4097 x 4099 x 4100 694 -> 631,
// 3000 x 4097 x 4100 493 -> 413, 2000 x 3000 x 4100 254 -> 225, 4095 x 4097
// x 1500 250 -> 216; nn 4095 x 4097 x 4100, A in place, 624 -> 515). Rows on
// the sectors (K = 1000, 2000, 3000, 8200 at that M x N) ran as fast in
// place or faster, and so did WgmmaLarge and the kSwapAB configurations off
// them (4096 x 4096 x 4100: 457 us in place against 464 packed).
template <class Config, bool kPackOffSectorRows>
Staging wgmma_staging(const GemmProblem& p) {
  if (Config::kSplit3) {
    Staging s;
    s.pack_a = true;
    s.split_a = PackSplit::kPartsAligned;
    return sized_staging(s, p);
  }
  if (Config::kSwapAB) return Staging{};
  Staging s = plan_staging(p, /*for_wgmma=*/true, /*tf32x3=*/false);
  if (kPackOffSectorRows) {
    s.pack_a = s.pack_a || !rows_aligned(p.A, p.M, p.lda, p.batch, p.batch_stride_a, 32);
    s.pack_b = s.pack_b || !rows_aligned(p.B, p.N, p.ldb, p.batch, p.batch_stride_b, 32);
    s = sized_staging(s, p);
  }
  return s;
}

// ---- The kernel table: how each Kernel runs, what it needs and its name ----
//
// Each kind of row provides:
//   kFamily               what it is (for the " 16-byte loads" note and tf32x3_on_fma)
//   kUnsplitTF32x3        whether it takes 3xTF32's unsplit operands in place
//                         (tf32x3_unstaged) rather than a staged problem
//   workspace_bytes(p, c) the workspace the launch needs
//   run(p, c, ...)        the launch, cudaErrorInvalidValue (launching nothing)
//                         where the workspace is too small
//   name(p, c)            what kernel_info reports
enum class Family { kWgmma, kMmaSync, kSkinny, kGemv, kFma };

// A wgmma configuration: packs what wgmma_staging says into the workspace,
// then runs on the staged operands, its split-K or stream-K partial sums in
// the workspace after the packs.
template <class Config, bool kPackOffSectorRows = false>
struct WgmmaRow {
  static constexpr Family kFamily = Family::kWgmma;
  // The weight split in registers, A's parts packed per call.
  static constexpr bool kUnsplitTF32x3 = Config::kSplit3;

  static size_t workspace_bytes(const GemmProblem& p, const Choice& c) {
    const Staging s = wgmma_staging<Config, kPackOffSectorRows>(p);
    return s.bytes_a + s.bytes_b + plan_wgmma_gemm<Config>(p, c.splits).workspace_bytes;
  }

  static cudaError_t run(const GemmProblem& p, const Choice& c, void* workspace, size_t workspace_bytes,
                         cudaStream_t stream, bool /*split3_in_registers*/) {
    const Staging s = wgmma_staging<Config, kPackOffSectorRows>(p);
    const size_t staged = s.bytes_a + s.bytes_b;
    if (staged > workspace_bytes)
      return step_result(cudaErrorInvalidValue, "workspace too small for the packed operands");
    auto* ws = static_cast<uint8_t*>(workspace);
    const cudaError_t err = launch_staging(p, s, ws, stream);
    if (err != cudaSuccess) return err;
    return launch_wgmma_gemm<Config>(staged_problem(p, s, ws), c.splits,
                                     reinterpret_cast<float*>(ws + staged), workspace_bytes - staged,
                                     stream);
  }

  static std::string name(const GemmProblem& p, const Choice& c) {
    using std::to_string;
    const Staging s = wgmma_staging<Config, kPackOffSectorRows>(p);
    std::string name = "wgmma " + to_string(Config::BM) + "x" + to_string(Config::BN) + "x" +
                       to_string(Config::BK) + " stages " + to_string(Config::kStages) +
                       // The operand with its own ring, named as the caller's (A under kSwapAB).
                       (Config::kOwnStagesB ? std::string(Config::kSwapAB ? " (A: " : " (B: ") +
                                                  to_string(Config::kStagesB) + ")"
                                            : "") +
                       " cluster " + to_string(Config::kClusterM) + "x1";
    if (Config::kPromoteKTiles == 1) name += " promoted every k-tile";
    if (Config::kPromoteKTiles > 1)
      name += " promoted every " + to_string(Config::kPromoteKTiles) + " k-tiles";
    if (Config::kSwapAB) name += " swap AB (B^T from registers, C^T stored transposed)";
    if (c.splits > 1) name += " split-K " + to_string(c.splits);
    const WgmmaPlan plan = plan_wgmma_gemm<Config>(p, c.splits);
    if (plan.stream_k) name += " stream-K last wave";
    if (plan.weight_evict_first) name += " B read once (L2 evict-first)";
    if (s.pack_a || s.pack_b)
      name += std::string(" after packing ") + (s.pack_a ? (s.pack_b ? "A and B" : "A") : "B") +
              " K-major";
    return name;
  }
};

// Which mma.sync instantiations a configuration has (mma_sync_gemm_*.cu):
// every layout with 16- and 4-byte loads; every layout with 16-byte loads
// only (MmaSyncLarge: four times the copy instructions in a mainloop that
// already spills; the 4-byte variant of the earlier 16-warp large tile
// spilled ~1 KB per thread); or only the staged operands of 3xTF32
// (row-major A, column-major B, 16-byte loads).
enum class MmaSyncBuilds { kAll, k16ByteLoads, kStagedOperands };

template <class Config, MmaSyncBuilds kBuilds>
struct MmaSyncRow {
  static constexpr Family kFamily = Family::kMmaSync;
  static constexpr bool kUnsplitTF32x3 = false;

  static size_t workspace_bytes(const GemmProblem&, const Choice&) { return 0; }

  static cudaError_t run(const GemmProblem& p, const Choice& c, void*, size_t, cudaStream_t stream,
                         bool) {
    using L = Layout;
    if (kBuilds == MmaSyncBuilds::kStagedOperands)
      return launch_mma_sync_gemm<Config, L::kRowMajor, L::kColMajor, true>(p, stream);
    if (kBuilds == MmaSyncBuilds::k16ByteLoads || c.vec16) return launch_layouts<true>(p, stream);
    return launch_layouts<false>(p, stream);
  }

  static std::string name(const GemmProblem&, const Choice&) {
    using std::to_string;
    return "mma_sync " + to_string(Config::BM) + "x" + to_string(Config::BN) + "x" +
           to_string(Config::BK) + " warp " + to_string(Config::WM) + "x" + to_string(Config::WN) +
           " stages " + to_string(Config::kStages) +
           (Config::kPromoteKTiles > 0
                ? " promoted every " + to_string(Config::kPromoteKTiles) + " k-tiles"
                : "");
  }

 private:
  template <bool kVec16>
  static cudaError_t launch_layouts(const GemmProblem& p, cudaStream_t stream) {
    using L = Layout;
    const bool a_row = p.layout_a == L::kRowMajor, b_row = p.layout_b == L::kRowMajor;
    if (a_row && b_row) return launch_mma_sync_gemm<Config, L::kRowMajor, L::kRowMajor, kVec16>(p, stream);
    if (a_row) return launch_mma_sync_gemm<Config, L::kRowMajor, L::kColMajor, kVec16>(p, stream);
    if (b_row) return launch_mma_sync_gemm<Config, L::kColMajor, L::kRowMajor, kVec16>(p, stream);
    return launch_mma_sync_gemm<Config, L::kColMajor, L::kColMajor, kVec16>(p, stream);
  }
};

// The skinny kernel (both operands K-major), splitting 3xTF32's operands in
// registers when run_chosen says they are unsplit.
template <class Shape>
struct SkinnyRow {
  static constexpr Family kFamily = Family::kSkinny;
  static constexpr bool kUnsplitTF32x3 = true;

  static size_t workspace_bytes(const GemmProblem&, const Choice&) { return 0; }

  static cudaError_t run(const GemmProblem& p, const Choice&, void*, size_t, cudaStream_t stream,
                         bool split3_in_registers) {
    return launch_skinny_gemm(kmajor_view(p), std::is_same_v<Shape, SkinnyWide>, split3_in_registers,
                              stream);
  }

  static std::string name(const GemmProblem& p, const Choice&) {
    using std::to_string;
    std::string name = "skinny " + to_string(Shape::kMaxM) + "x" + to_string(Shape::kBlockN) + "x" +
                       to_string(Shape::kBlockK) + " k-slices " + to_string(Shape::kSlices) +
                       " stages " + to_string(Shape::kStagesB) + " (B in shared memory), " +
                       to_string(Shape::kStages) + " (A)";
    if (p.M > Shape::kMaxM)
      name += " (in blocks of " + to_string(Shape::kMaxM) + " rows, one pass over B each)";
    return name;
  }
};

// "1 K-slice per output", "4 K-slices per output": the GEMVs' names.
std::string k_slices(int slices) {
  return std::to_string(slices) + " K-slice" + (slices > 1 ? "s" : "") + " per output";
}

// The FP32 GEMVs compute in FP32 whatever the precision: 3xTF32's unsplit
// operands run as they are, at least as accurately.
struct GemvKMajorRow {
  static constexpr Family kFamily = Family::kGemv;
  static constexpr bool kUnsplitTF32x3 = true;

  static size_t workspace_bytes(const GemmProblem&, const Choice&) { return 0; }

  static cudaError_t run(const GemmProblem& p, const Choice& c, void*, size_t, cudaStream_t stream,
                         bool) {
    return launch_gemv_kmajor(kmajor_view(p), c.splits, stream);
  }

  static std::string name(const GemmProblem&, const Choice& c) {
    return "gemv, FP32 FMAs, " + k_slices(c.splits);
  }
};

struct GemvKMajorRowsRow {
  static constexpr Family kFamily = Family::kGemv;
  static constexpr bool kUnsplitTF32x3 = true;

  static size_t workspace_bytes(const GemmProblem&, const Choice&) { return 0; }

  static cudaError_t run(const GemmProblem& p, const Choice& c, void*, size_t, cudaStream_t stream,
                         bool) {
    return launch_gemv_kmajor_rows(kmajor_view(p), c.splits, stream);
  }

  static std::string name(const GemmProblem& p, const Choice& c) {
    return "gemv, FP32 FMAs, " + std::to_string(p.M) + " rows of A, " +
           std::to_string(GemvKMajorRowsConfig<kGemvKMajorRowsMaxRows>::kWeightRows) +
           " weight rows per warp, " +
           k_slices(c.splits);
  }
};

// Rows whose split-K ranges add up through FP32 partial sums in the workspace.
struct SplitKPartialsRow {
  static size_t workspace_bytes(const GemmProblem& p, const Choice& c) {
    return splitk_partials_bytes(c.splits, p.M, p.N);
  }
  static bool partials_fit(const GemmProblem& p, const Choice& c, size_t workspace_bytes) {
    return SplitKPartialsRow::workspace_bytes(p, c) <= workspace_bytes;
  }
};

struct GemvRowMajorRow : SplitKPartialsRow {
  static constexpr Family kFamily = Family::kGemv;
  static constexpr bool kUnsplitTF32x3 = true;

  static cudaError_t run(const GemmProblem& p, const Choice& c, void* workspace, size_t workspace_bytes,
                         cudaStream_t stream, bool) {
    if (!partials_fit(p, c, workspace_bytes)) return cudaErrorInvalidValue;
    return launch_gemv_rowmajor(p, c.splits, static_cast<float*>(workspace), stream);
  }

  static std::string name(const GemmProblem& p, const Choice& c) {
    std::string name = "gemv, FP32 FMAs, B read row by row, " +
                       std::to_string(GemvRowMajorShape::kCols) + " columns per CTA";
    if (p.M > 1) name += ", " + std::to_string(p.M) + " rows of A on each load of B";
    if (p.M > kGemvRowMajorMaxRows)
      name += " (in blocks of " + std::to_string(kGemvRowMajorMaxRows) + ", one pass over B each)";
    if (c.splits > 1) name += ", split-K " + std::to_string(c.splits);
    return name;
  }
};

template <class Config>
struct FmaRow : SplitKPartialsRow {
  static constexpr Family kFamily = Family::kFma;
  static constexpr bool kUnsplitTF32x3 = false;

  static cudaError_t run(const GemmProblem& p, const Choice& c, void* workspace, size_t workspace_bytes,
                         cudaStream_t stream, bool) {
    if (!partials_fit(p, c, workspace_bytes)) return cudaErrorInvalidValue;
    return launch_fma_gemm<Config>(p, c.splits, static_cast<float*>(workspace), stream);
  }

  static std::string name(const GemmProblem&, const Choice& c) {
    using std::to_string;
    return "fma " + to_string(Config::BM) + "x" + to_string(Config::BN) + "x" +
           to_string(Config::BK) + ", " + to_string(Config::kThreadRows) + "x" +
           to_string(Config::kThreadCols) + " per thread" +
           (c.splits > 1 ? ", split-K " + to_string(c.splits) : "");
  }
};

template <Kernel K, class Kind>
struct Row : Kind {
  static constexpr Kernel kKernel = K;
};

using KernelTable = std::tuple<
    Row<Kernel::kWgmmaLarge, WgmmaRow<WgmmaLarge>>,
    Row<Kernel::kWgmmaLargeSwapAB, WgmmaRow<WgmmaLargeSwapAB>>,
    Row<Kernel::kWgmmaSquare, WgmmaRow<WgmmaSquare, /*kPackOffSectorRows=*/true>>,
    Row<Kernel::kWgmmaMedium, WgmmaRow<WgmmaMedium>>,
    Row<Kernel::kWgmmaMediumSwapAB, WgmmaRow<WgmmaMediumSwapAB>>,
    Row<Kernel::kWgmmaNarrow, WgmmaRow<WgmmaNarrow>>,
    Row<Kernel::kWgmmaNarrowSwapAB, WgmmaRow<WgmmaNarrowSwapAB>>,
    Row<Kernel::kWgmmaMediumSwapABRing, WgmmaRow<WgmmaMediumSwapABRing>>,
    Row<Kernel::kWgmmaPromotedLarge, WgmmaRow<WgmmaPromotedLarge>>,
    Row<Kernel::kWgmmaPromotedMedium, WgmmaRow<WgmmaPromotedMedium>>,
    Row<Kernel::kWgmmaSplit3SwapAB, WgmmaRow<WgmmaSplit3SwapAB>>,
    Row<Kernel::kWgmmaSplit3SwapABKMajor, WgmmaRow<WgmmaSplit3SwapABKMajor>>,
    Row<Kernel::kWgmmaSplit3SwapABNarrow, WgmmaRow<WgmmaSplit3SwapABNarrow>>,
    Row<Kernel::kWgmmaSplit3SwapABKMajorNarrow, WgmmaRow<WgmmaSplit3SwapABKMajorNarrow>>,
    Row<Kernel::kMmaSyncLarge, MmaSyncRow<MmaSyncLarge, MmaSyncBuilds::k16ByteLoads>>,
    Row<Kernel::kMmaSyncMedium, MmaSyncRow<MmaSyncMedium, MmaSyncBuilds::kAll>>,
    Row<Kernel::kMmaSyncSmall, MmaSyncRow<MmaSyncSmall, MmaSyncBuilds::kAll>>,
    Row<Kernel::kMmaSyncPromoted, MmaSyncRow<MmaSyncPromoted, MmaSyncBuilds::kStagedOperands>>,
    Row<Kernel::kMmaSyncCompact, MmaSyncRow<MmaSyncCompact, MmaSyncBuilds::kAll>>,
    Row<Kernel::kMmaSyncPromotedCompact, MmaSyncRow<MmaSyncPromotedCompact, MmaSyncBuilds::kStagedOperands>>,
    Row<Kernel::kSkinny, SkinnyRow<SkinnyNarrow>>,
    Row<Kernel::kSkinnyWide, SkinnyRow<SkinnyWide>>,
    Row<Kernel::kGemvKMajor, GemvKMajorRow>,
    Row<Kernel::kGemvKMajorRows, GemvKMajorRowsRow>,
    Row<Kernel::kGemvRowMajor, GemvRowMajorRow>,
    Row<Kernel::kFmaLarge, FmaRow<FmaLarge>>,
    Row<Kernel::kFmaSmall, FmaRow<FmaSmall>>>;

template <size_t... I>
constexpr bool one_row_per_kernel(std::index_sequence<I...>) {
  return sizeof...(I) == size_t(Kernel::kCount) &&
         ((std::tuple_element_t<I, KernelTable>::kKernel == Kernel(I)) && ...);
}
static_assert(one_row_per_kernel(std::make_index_sequence<std::tuple_size_v<KernelTable>>{}),
              "the kernel table needs exactly one row per Kernel, in the enum's order");

template <class F, size_t... I>
auto with_row(Kernel k, F&& f, std::index_sequence<I...>) {
  decltype(f(std::tuple_element_t<0, KernelTable>{})) result{};
  const bool found = ((size_t(k) == I && ((result = f(std::tuple_element_t<I, KernelTable>{})), true)) || ...);
  if (!found) throw std::logic_error("pygpukit: no kernel table row for kernel " + std::to_string(int(k)));
  return result;
}

// f(row) for the row of kernel `k`, returning what f returns.
template <class F>
auto with_row(Kernel k, F&& f) {
  return with_row(k, std::forward<F>(f), std::make_index_sequence<std::tuple_size_v<KernelTable>>{});
}

Family family(Kernel k) {
  return with_row(k, [](auto row) { return decltype(row)::kFamily; });
}

// 3xTF32 runs as one TF32 GEMM over 3K columns of packed big/small parts
// (PackSplit), on whatever kernel TF32 would choose for that problem; where
// TF32 itself is unavailable (the FMA kernel), the plain FP32 kernel, which
// is at least as accurate. A 256-byte aligned stand-in for the workspace
// address lets the sizing see the packed operands' (aligned) layout.
const uint8_t* const kAlignedStandIn = reinterpret_cast<const uint8_t*>(uintptr_t{256});

bool tf32x3_on_fma(const GemmProblem& p) {
  return family(choose(p, Precision::kTF32, device_info(current_device())).kernel) == Family::kFma;
}

// 3xTF32 on the unsplit operands, read in place, which saves the pack (three
// copies of the weight per call): the skinny kernel splits them in
// registers, WgmmaSplit3SwapAB the weight (packing only the few rows of A),
// the GEMV computes in FP32, at least as accurate as 3xTF32.
bool tf32x3_unstaged(const GemmProblem& p) {
  const Kernel k = choose(p, Precision::kTF32x3, device_info(current_device())).kernel;
  return with_row(k, [](auto row) { return decltype(row)::kUnsplitTF32x3; });
}

// Workspace, launch and name of what choose() picks for `p`; for kTF32x3,
// `p` is the staged problem.
size_t chosen_workspace_bytes(const GemmProblem& p, Precision precision) {
  const Choice c = choose(p, precision, device_info(current_device()));
  return with_row(c.kernel, [&](auto row) { return decltype(row)::workspace_bytes(p, c); });
}

// split3_in_registers: `p` holds 3xTF32's unsplit operands, which the
// skinny kernel splits itself (tf32x3_unstaged; the weight-splitting wgmma
// kernels and the GEMVs need no flag); a staged problem's parts are already
// split and run as plain TF32.
cudaError_t run_chosen(const GemmProblem& p, Precision precision, void* workspace,
                       size_t workspace_bytes, cudaStream_t stream,
                       bool split3_in_registers = false) {
  const Choice c = choose(p, precision, device_info(current_device()));
  return with_row(c.kernel, [&](auto row) {
    return decltype(row)::run(p, c, workspace, workspace_bytes, stream, split3_in_registers);
  });
}

std::string describe_chosen(const GemmProblem& p, Precision precision) {
  const Choice c = choose(p, precision, device_info(current_device()));
  std::string name = with_row(c.kernel, [&](auto row) { return decltype(row)::name(p, c); });
  name += std::string(" (A ") + layout_name(p.layout_a) + ", B " + layout_name(p.layout_b);
  const Family f = family(c.kernel);
  if (f != Family::kFma && f != Family::kWgmma) name += c.vec16 ? ", 16-byte loads" : ", 4-byte loads";
  return name + ")";
}

// Precision "fp32" (FP32-accurate) runs the Ozaki scheme where it runs and
// its fixed costs (six launches, the passes over A, B and C's residues) are
// paid back, or where it is forced ("ozaki"); otherwise plain FP32 ("ieee").
// 3xTF32 is not a fallback: it loses to FP32 on wide exponent ranges,
// dominant entries and subnormals (docs/precision.md). H100, TFLOP/s,
// Ozaki / the FMA kernel: 1024^3 9.8 / 28.4, 2048^3 35.8 / 35.9 (a tie,
// at a twentieth of the error), 4096^3 77.2 / 37.3 (2026-12-08, one run,
// Ozaki forced); M = 128, N = K = 4096: 11.1 / 24.5 (2026-12-07).
constexpr double kOzakiMinMacs = 8589934592.0;  // 2048^3
constexpr int64_t kOzakiMinSide = 1024;
bool runs_ozaki(const GemmProblem& p) {
  const DeviceInfo& d = device_info(current_device());
  if (p.forced != ForcedKernel::kAuto && p.forced != ForcedKernel::kOzaki) return false;
  return ozaki_runs(p, d.cc_major, d.cc_minor) &&
         (p.forced == ForcedKernel::kOzaki ||
          (macs(p, true) >= kOzakiMinMacs && std::min(p.M, p.N) >= kOzakiMinSide));
}

// A forced "ozaki" that does not run (another precision, or a problem the
// scheme cannot take) leaves the choice to the dispatcher, as a forced
// kernel that cannot run does.
GemmProblem unforced(const GemmProblem& p) {
  GemmProblem q = p;
  q.forced = ForcedKernel::kAuto;
  return q;
}

}  // namespace

size_t gemm_workspace_bytes(const GemmProblem& p, Precision precision) {
  if (precision == Precision::kFP32 && runs_ozaki(p)) return ozaki_workspace_bytes(p);
  if (p.forced == ForcedKernel::kOzaki) return gemm_workspace_bytes(unforced(p), precision);
  if (precision == Precision::kFP32) return gemm_workspace_bytes(p, Precision::kIEEE);
  if (precision == Precision::kTF32x3) {
    // Without TF32 (the FMA kernel): FP32, at least as accurate.
    if (tf32x3_on_fma(p)) return chosen_workspace_bytes(p, Precision::kIEEE);
    if (tf32x3_unstaged(p)) return chosen_workspace_bytes(p, precision);
    const Staging s = plan_staging(p, false, true);
    return s.bytes_a + s.bytes_b +
           chosen_workspace_bytes(staged_problem(p, s, kAlignedStandIn), precision);
  }
  return chosen_workspace_bytes(p, precision);
}

cudaError_t run_gemm(const GemmProblem& p, Precision precision, void* workspace,
                     size_t workspace_bytes, cudaStream_t stream) {
  if (precision == Precision::kFP32 && runs_ozaki(p))
    return run_ozaki_gemm(p, workspace, workspace_bytes, stream);
  if (p.forced == ForcedKernel::kOzaki)
    return run_gemm(unforced(p), precision, workspace, workspace_bytes, stream);
  if (precision == Precision::kFP32) return run_gemm(p, Precision::kIEEE, workspace, workspace_bytes, stream);
  if (precision == Precision::kTF32x3) {
    if (tf32x3_on_fma(p)) return run_chosen(p, Precision::kIEEE, workspace, workspace_bytes, stream);
    if (tf32x3_unstaged(p))
      return run_chosen(p, precision, workspace, workspace_bytes, stream,
                        /*split3_in_registers=*/true);
    const Staging s = plan_staging(p, false, true);
    const size_t staged = s.bytes_a + s.bytes_b;
    if (staged > workspace_bytes)
      return step_result(cudaErrorInvalidValue, "workspace too small for 3xTF32's packed parts");
    auto* ws = static_cast<uint8_t*>(workspace);
    const cudaError_t err = launch_staging(p, s, ws, stream);
    if (err != cudaSuccess) return err;
    return run_chosen(staged_problem(p, s, ws), precision, ws + staged, workspace_bytes - staged,
                      stream);
  }
  return run_chosen(p, precision, workspace, workspace_bytes, stream);
}

std::string describe_gemm(const GemmProblem& p, Precision precision) {
  if (precision == Precision::kFP32 && runs_ozaki(p)) return describe_ozaki(p);
  if (p.forced == ForcedKernel::kOzaki) return describe_gemm(unforced(p), precision);
  if (precision == Precision::kFP32) return "FP32-accurate by FP32: " + describe_gemm(p, Precision::kIEEE);
  if (precision == Precision::kTF32x3) {
    if (tf32x3_on_fma(p))
      return describe_chosen(p, Precision::kIEEE) + " (3xTF32 without TF32 tensor cores: plain FP32)";
    if (tf32x3_unstaged(p)) {
      const Family f = family(choose(p, precision, device_info(current_device())).kernel);
      if (f == Family::kGemv) return "FP32 (at least as accurate as 3xTF32) on " + describe_chosen(p, precision);
      return (f == Family::kWgmma
                  ? "3xTF32 (B split into big and small TF32 parts in registers, A's packed) on "
                  : "3xTF32 (A, B split into big and small TF32 parts in registers) on ") +
             describe_chosen(p, precision);
    }
    const Staging s = plan_staging(p, false, true);
    return "3xTF32 (A, B split into big and small TF32 parts, 3K columns) on " +
           describe_chosen(staged_problem(p, s, kAlignedStandIn), precision);
  }
  return describe_chosen(p, precision);
}

}  // namespace pygpukit
