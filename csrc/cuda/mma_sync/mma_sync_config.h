// Tile configurations of the mma.sync TF32 kernel and the declaration of its
// launcher. The kernel template is defined in mma_sync_gemm.cuh and
// instantiated once per operand layout in mma_sync_gemm_<a><b>.cu, so the
// dispatcher includes only this light header.
#pragma once

#include "cuda/gemm_problem.h"
#include "cuda/common/int_math.h"

namespace pygpukit {

// Threadblock tile BM x BN x BK, warp tile WM x WN, kStages-deep cp.async
// pipeline. Threads = (BM / WM) * (BN / WN) warps of 32. kPromoteKTiles > 0:
// every that many k-tiles the accumulators are added into a second register
// set with FP32 adds and restarted from zero, because the tensor cores'
// accumulation is not rounded to nearest and its error grows with the chain
// (see WgmmaConfig); 3xTF32 needs it to beat FP32 accuracy. kMinBlocksPerSM:
// the kernel's __launch_bounds__ minimum, which caps registers per thread at
// 65536 / (kMinBlocksPerSM * kThreads). kInsideCopyStep: the k8 step of an
// interior k-tile (16-byte copies, the whole tile inside the operands) after
// whose MMAs the next stage's copies are issued; edge k-tiles issue them
// after step 0.
template <int BM_, int BN_, int BK_, int WM_, int WN_, int kStages_, int kPromoteKTiles_ = 0,
          int kMinBlocksPerSM_ = 1, int kInsideCopyStep_ = 1>
struct MmaSyncConfig {
  static constexpr int BM = BM_, BN = BN_, BK = BK_;
  static constexpr int WM = WM_, WN = WN_;
  static constexpr int kStages = kStages_;
  static constexpr int kPromoteKTiles = kPromoteKTiles_;
  static constexpr int kMinBlocksPerSM = kMinBlocksPerSM_;
  static constexpr int kInsideCopyStep = kInsideCopyStep_;
  static constexpr int kWarpsM = BM / WM, kWarpsN = BN / WN;
  static constexpr int kThreads = kWarpsM * kWarpsN * 32;
  static constexpr int kMmaM = WM / 16, kMmaN = WN / 8;  // m16n8k8 tiles per warp
  static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles must cover the threadblock tile");
  static_assert(WM % 16 == 0 && WN % 32 == 0 && BK % 8 == 0,
                "tile sizes must fit m16n8k8 (and whole 32-column groups, see mn_major_offset)");
  static_assert(kStages >= 2, "the pipeline needs at least two stages");
  static_assert(kInsideCopyStep >= 0 && kInsideCopyStep < BK / 8, "a k8 step of the k-tile");

  // Threadblock tiles covering an M x N output.
  static constexpr int64_t tiles(int64_t M, int64_t N) {
    return ceil_div(M, BM) * ceil_div(N, BN);
  }
};

// 256x128x32, 8 warps of 64x64, 3 stages: 144 KB of shared memory (sm_80:
// 163 KB, sm_90: 227 KB per block), 251-255 registers per thread. 64x64 warp tiles load
// 128 B of fragments from shared memory per MMA where 64x32 ones load 192.
// Chosen on the mainloop before the swizzled stages and the staged
// epilogue: H100, 2026-12-07, forced in one run
// (benchmarks/experiments/mma_sync_configs.sh), TFLOP/s tn / nn at 4096^3,
// 8192^3, 8192x14336x4096, 8192x4096x14336:
//   this tile            150.3/146.0 179.0/168.3 145.0/140.8 184.1/182.1
//   128x256, warp 64x64  147.3/147.4 175.9/167.9 144.0/142.5 177.1/183.2
//   128x256, warp 64x32  146.1/158.4 153.1/157.3 144.2/153.2 147.8/158.4
//     (16 warps, the fragment loads not double-buffered)
// The kernel as it is now: docs/performance.md ("The mma.sync kernel, step by step").
using MmaSyncLarge = MmaSyncConfig<256, 128, 32, 64, 64, 3>;
// 128x128x32, 8 warps of 64x32, 4 stages: 128 KB, for problems with too few
// 128x256 tiles to fill the GPU. Interior copies after the last k8 step
// (2026-12-02, H200, forced at 2048^3 against step 1 in alternate
// processes, two rounds, TFLOP/s: nn 85.6-85.8 -> 91.9-92.0, nt 87.0-87.6
// -> 90.3-91.9, tn 90.2 -> 90.9-91.1, tt 87.4-87.9 -> 91.7-91.9; step 2
// gave nn 89.5-89.6; step 1 against step 0 had given nn +0.5%).
using MmaSyncMedium = MmaSyncConfig<128, 128, 32, 64, 32, 4, 0, 1, 3>;
// 64x64x32, 4 warps of 32x32, 4 stages: 64 KB, fits the 99 KB of sm_86 /
// sm_89 and gives 4x more threadblocks again on small problems. Bounded to
// three blocks per SM (<= 168 registers; the 16-byte variants only, see the
// kernel), which Hopper's 227 KB of shared memory holds: unbounded, ptxas
// gave the 16-byte variants 168-180 registers, two blocks per SM. Interior
// copies after the first k8 step: 1024 x 1024 x 4096, forced, 2026-12-02,
// against step 0 in alternate processes, TFLOP/s: step 1 nt 68.3-68.4 ->
// 66.7-67.2; step 2 nt 68.6-69.2 -> 71.0-71.5, tn 71.0-71.1 -> 73.3-73.4,
// nn 67.1-67.2 -> 67.2, tt 66.9-67.3 -> 62.8-63.1 (a trade between
// layouts, not taken).
using MmaSyncSmall = MmaSyncConfig<64, 64, 32, 32, 32, 4, 0, 3, 0>;
// MmaSyncMedium's tile promoting every 4 k-tiles (64 + 64 accumulator
// registers: the large tile's 64x64 warp tiles have no room for a second set), for
// 3xTF32, whose staged operands are always row-major A and column-major B,
// 16-byte aligned. Its interior copies stay after step 0: later steps were
// not timed with it, and step 1 raised its spills from 28 to 60 bytes.
using MmaSyncPromoted = MmaSyncConfig<128, 128, 32, 64, 32, 4, 4, 1, 0>;
// MmaSyncMedium's and MmaSyncPromoted's tiles with 3 stages: 96 KB, for GPUs
// whose blocks may use at most 99 KB of shared memory (sm_86, sm_87, sm_89:
// RTX 30/40, A10, L4, L40S), where those two and MmaSyncLarge do not fit.
// Without them such a GPU would run MmaSyncSmall's 64x64 tile, and 3xTF32
// an unpromoted one, whose error at 4096^3 is 8x cuBLAS FP32's (9.6e-6
// against 1.15e-6, H200). Chosen only where the 4-stage tiles do not fit;
// not measured on such a GPU (none is available to us).
using MmaSyncCompact = MmaSyncConfig<128, 128, 32, 64, 32, 3, 0, 1, 3>;
using MmaSyncPromotedCompact = MmaSyncConfig<128, 128, 32, 64, 32, 3, 4, 1, 0>;

// kVec16: both operands are read with 16-byte cp.async (base pointers 16-byte
// aligned, leading dimensions and batch strides multiples of 4 elements);
// otherwise with 4-byte cp.async.
template <class Config, Layout kLayoutA, Layout kLayoutB, bool kVec16>
cudaError_t launch_mma_sync_gemm(const GemmProblem& problem, cudaStream_t stream);

// One stage of one operand in shared memory: a kRows x kCols tile whose rows
// are contiguous in global memory, kCols floats apart (no padding), with the
// 16-byte chunks of each 128-byte group of a row permuted: chunk c of row r
// sits at c ^ swizzle(r). Each 128-byte piece of a global row thus lands in
// one aligned 128-byte line of shared memory, which cp.async needs to move
// it as one request: with rows padded by 16 or 32 bytes instead (the layout
// before), ncu counted 1.5x the ideal L2 sectors and 2.6x the ideal
// shared-memory wavefronts for every 16-byte cp.async of MmaSyncLarge (H100,
// 8192^3, B column-major; CUTLASS's sm80 kernel: exactly the ideal), and the
// L2 ran at 88% of its peak throughput against CUTLASS's 55%.
//   K-major operand (row-major A, column-major B): kRows = BM or BN, kCols =
//     BK = 32; swizzle(r) = r mod 8 puts the 8 rows of an ldmatrix 8x16-byte
//     block in 8 different 4-bank groups.
//   MN-major operand: kRows = BK, kCols = BM or BN; swizzle(r) = 2 (r mod 4)
//     makes the fragment loads from rows k = t and t + 4 (t < 4) conflict-free:
//     the scalar ones (k = t, column g) and the 8-byte ones (k = t, columns 2g,
//     2g + 1) of one phase hit 8 different 4-bank groups.
template <int kMN, int kBK, bool kKMajor>
struct SmemTile {
  static constexpr int kRows = kKMajor ? kMN : kBK;
  static constexpr int kCols = kKMajor ? kBK : kMN;
  static constexpr int kFloats = kRows * kCols;
  static constexpr int kSwizzleRows = kKMajor ? 8 : 4;  // rows after which swizzle repeats
  static_assert(kCols % 32 == 0, "rows of whole 128-byte groups");
  static_assert(!kKMajor || kCols == 32, "the K-major swizzle spans one 128-byte row");

  __host__ __device__ static constexpr int swizzle(int row) {
    return kKMajor ? row % 8 : (row % 4) * 2;
  }
  // Place of element (row, col), in floats from the stage's start.
  __host__ __device__ static constexpr int offset(int row, int col) {
    return row * kCols + (((col / 4) ^ swizzle(row)) * 4) + col % 4;
  }
};

// Whether the kernel runs swapped (C^T = B^T A^T per warp, see the kernel):
// for row-major A and B, a @ b.
constexpr bool mma_sync_swaps_ab(bool a_k_major, bool b_k_major) { return a_k_major && !b_k_major; }

// One warp's WM x WN accumulator tile staged in shared memory by the
// epilogue (over the pipeline's stages, which the mainloop no longer needs),
// so that it leaves as whole rows of 16-byte stores. The row stride S makes
// the fragments' 8-byte stores conflict-free: a phase writes four rows of
// four lanes, which need S = 8 mod 32 words where the rows are g apart
// (row-major A) and 4 mod 16 where 2g or 2t apart (column-major A, and the
// swapped kernel of row-major A and B; see the kernel). WN itself is a
// multiple of 32 (MmaSyncConfig).
template <class Config, bool kAKMajor, bool kBKMajor>
struct WarpStagingTile {
  static constexpr bool kSwapAB = mma_sync_swaps_ab(kAKMajor, kBKMajor);
  static constexpr int kStride = Config::WN + (kAKMajor && !kSwapAB ? 8 : 4);
  static constexpr int kFloats = Config::WM * kStride;
};

template <class Config>
constexpr int mma_sync_smem_bytes(Layout layout_a, Layout layout_b) {
  const int a = layout_a == Layout::kRowMajor
                    ? SmemTile<Config::BM, Config::BK, true>::kFloats
                    : SmemTile<Config::BM, Config::BK, false>::kFloats;
  const int b = layout_b == Layout::kColMajor
                    ? SmemTile<Config::BN, Config::BK, true>::kFloats
                    : SmemTile<Config::BN, Config::BK, false>::kFloats;
  const int stages = Config::kStages * (a + b);
  const bool a_k = layout_a == Layout::kRowMajor, b_k = layout_b == Layout::kColMajor;
  const int staging = (Config::kThreads / 32) *
                      (a_k ? (b_k ? WarpStagingTile<Config, true, true>::kFloats
                                  : WarpStagingTile<Config, true, false>::kFloats)
                           : (b_k ? WarpStagingTile<Config, false, true>::kFloats
                                  : WarpStagingTile<Config, false, false>::kFloats));
  return (stages > staging ? stages : staging) * static_cast<int>(sizeof(float));
}

}  // namespace pygpukit
