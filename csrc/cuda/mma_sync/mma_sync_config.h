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
  static_assert(WM % 16 == 0 && WN % 16 == 0 && BK % 8 == 0, "tile sizes must fit m16n8k8");
  static_assert(kStages >= 2, "the pipeline needs at least two stages");
  static_assert(kInsideCopyStep >= 0 && kInsideCopyStep < BK / 8, "a k8 step of the k-tile");

  // Threadblock tiles covering an M x N output.
  static constexpr int64_t tiles(int64_t M, int64_t N) {
    return ceil_div(M, BM) * ceil_div(N, BN);
  }
};

// 256x128x32, 8 warps of 64x64, 3 stages: ~160 KB of shared memory (sm_80:
// 163 KB, sm_90: 227 KB per block), 255 registers per thread (ptxas spills
// ~1 KB per thread, outside the k8 steps' MMAs). 64x64 warp tiles load 128 B
// of fragments from shared memory per MMA where 64x32 ones load 192. H100,
// 2026-12-07, forced in one run (benchmarks/experiments/mma_sync_configs.sh),
// TFLOP/s tn / nn at 4096^3, 8192^3, 8192x14336x4096, 8192x4096x14336:
//   this tile            150.3/146.0 179.0/168.3 145.0/140.8 184.1/182.1
//   128x256, warp 64x64  147.3/147.4 175.9/167.9 144.0/142.5 177.1/183.2
//   128x256, warp 64x32  146.1/158.4 153.1/157.3 144.2/153.2 147.8/158.4
//     (16 warps, the fragment loads not double-buffered)
// A later run gave 128x256 with 16 warps of 64x32 on this mainloop
// 162.1/145.7 168.0/152.9 150.2/145.7 165.7/152.7.
using MmaSyncLarge = MmaSyncConfig<256, 128, 32, 64, 64, 3>;
// 128x128x32, 8 warps of 64x32, 4 stages: ~144 KB, for problems with too few
// 128x256 tiles to fill the GPU. Interior copies after the last k8 step
// (2026-12-02, H200, forced at 2048^3 against step 1 in alternate
// processes, two rounds, TFLOP/s: nn 85.6-85.8 -> 91.9-92.0, nt 87.0-87.6
// -> 90.3-91.9, tn 90.2 -> 90.9-91.1, tt 87.4-87.9 -> 91.7-91.9; step 2
// gave nn 89.5-89.6; step 1 against step 0 had given nn +0.5%).
using MmaSyncMedium = MmaSyncConfig<128, 128, 32, 64, 32, 4, 0, 1, 3>;
// 64x64x32, 4 warps of 32x32, 4 stages: ~72 KB, fits the 99 KB of sm_86 /
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
// registers: the 16-warp large tile has no room for a second set), for
// 3xTF32, whose staged operands are always row-major A and column-major B,
// 16-byte aligned. Its interior copies stay after step 0: later steps were
// not timed with it, and step 1 raised its spills from 28 to 60 bytes.
using MmaSyncPromoted = MmaSyncConfig<128, 128, 32, 64, 32, 4, 4, 1, 0>;

// kVec16: both operands are read with 16-byte cp.async (base pointers 16-byte
// aligned, leading dimensions and batch strides multiples of 4 elements);
// otherwise with 4-byte cp.async.
template <class Config, Layout kLayoutA, Layout kLayoutB, bool kVec16>
cudaError_t launch_mma_sync_gemm(const GemmProblem& problem, cudaStream_t stream);

// One stage of one operand in shared memory: a kRows x kCols tile whose rows
// are contiguous in global memory, stored with a padded row stride.
//   K-major operand (row-major A, column-major B): kRows = BM or BN, kCols =
//     BK; stride BK + 4 words puts the 8 rows of an ldmatrix 8x16-byte block
//     in 8 different 4-bank groups (36r mod 32 = 4r), so it is conflict-free.
//   MN-major operand: kRows = BK, kCols = BM or BN; stride kCols + 8 makes the
//     fragment loads conflict-free: B's scalar ones, (k = t, n = g) for g < 8,
//     t < 4, hit bank 8t + g; A's 8-byte ones (k = t, m = 2g, 2g + 1) start
//     at bank 8t + 2g, 16 lanes per phase.
// 16-byte cp.async stores of 8 consecutive chunks of a row are conflict-free
// with either stride.
template <int kMN, int kBK, bool kKMajor>
struct SmemTile {
  static constexpr int kRows = kKMajor ? kMN : kBK;
  static constexpr int kCols = kKMajor ? kBK : kMN;
  static constexpr int kStride = kCols + (kKMajor ? 4 : 8);
  static constexpr int kFloats = kRows * kStride;
};

template <class Config>
constexpr int mma_sync_smem_bytes(Layout layout_a, Layout layout_b) {
  const int a = layout_a == Layout::kRowMajor
                    ? SmemTile<Config::BM, Config::BK, true>::kFloats
                    : SmemTile<Config::BM, Config::BK, false>::kFloats;
  const int b = layout_b == Layout::kColMajor
                    ? SmemTile<Config::BN, Config::BK, true>::kFloats
                    : SmemTile<Config::BN, Config::BK, false>::kFloats;
  return Config::kStages * (a + b) * static_cast<int>(sizeof(float));
}

}  // namespace pygpukit
