// Tile configuration of the Hopper (sm_90a) TF32 kernel and the declaration
// of its launcher. The kernel is in wgmma_gemm.cuh; see the Hopper section of
// docs/design.md.
#pragma once

#include <cstdint>

#include "cuda/gemm_problem.h"
#include "cuda/common/int_math.h"

namespace pygpukit {

// Threadblock tile BM x BN x BK with a kStages-deep TMA pipeline. One
// producer warpgroup issues the TMA copies; BM / 64 consumer warpgroups each
// own 64 rows of the tile and issue wgmma.m64n{BN}k8 on them. Threadblocks
// run in clusters of kClusterM along M that share their B tile: each loads
// 1 / kClusterM of it and multicasts that part to all, which cuts the L2->SM
// traffic per FLOP (what limits a TF32 GEMM, whose operands are twice the
// bytes of BF16 ones at half the FLOP rate).
//
// kPromoteKTiles > 0: the tensor cores' FP32 accumulation is not rounded to
// nearest, and its error grows about linearly with the length of one
// accumulation chain (H200, inputs exact in TF32: 3.3e-7 relative after 128
// products, 1.2e-6 after 512, 9.6e-6 after 4096; cuBLAS FP32 2.9e-7). Such
// configurations start a fresh wgmma accumulation every kPromoteKTiles
// k-tiles and add it into a second set of FP32 registers with ordinary
// (round-to-nearest) adds, as 3xTF32 needs to beat FP32 accuracy. The second
// set doubles the accumulator registers, hence a 64 x 128 tile per warpgroup.
//
// kOperands says where the MMAs read their operands from (WgmmaOperands
// below); the three flags derived from it, kSwapAB, kSplit3 and
// kSwapKMajor, are what the kernel tests.
//
// kSwapAB: the configuration runs a plain `a @ b` (A and B both row-major)
// without packing B K-major first. TF32 wgmma reads only K-major operands
// from shared memory, but its A operand may come from registers in any
// order, so the kernel computes C^T = B^T A^T (CUTLASS's "SwapAB + RS"
// pattern): its A operand is B^T, TMA-loaded N-major and
// read into registers; its B operand is A, K-major as it lies; its output
// is C^T, written transposed into C by the epilogue. BM then runs along
// C's N and BN along C's M.
//
// kSplit3 (with kSwapAB; 3xTF32 at decode-sized M): the register operand,
// B^T (the weight), is TMA-loaded as FP32 and split in registers into big,
// small and corr parts (tf32_split.cuh), so the weight is read once, in
// place; the shared-memory operand A (the activations, a few rows) comes
// packed per call as [big | small | corr] (PackSplit::kPartsAligned), the
// three parts of a k-tile side by side in each stage. Per k8 step three MMAs
// into one accumulation: B_small * A_corr + B_corr * A_small + B_big * A_big.
// Promoted every k-tile (kPromoteKTiles 1). With BN 64 two fragment sets
// alternate, so the next k-tile's loads and split overlap this one's MMAs;
// with BN 128 one set (the registers allow no second), reloaded after each
// k-tile's MMAs retire.
//
// kSwapKMajor (with kSwapAB): B is column-major instead (B^T K-major, as
// F.linear's weight [N][K] lies), loaded as one K-major box per stage and
// read into registers row by row.
//
// kStagesB_ > 0 (unclustered only): B has its own ring of kStagesB_ slots,
// fed by a second producer thread, instead of sharing A's kStages. At
// decode-sized M the weight streams from DRAM while the few rows of
// activations come from L2 (H200, ncu, M = 128, x @ W to N = 14336 unsplit:
// 68% of DRAM's rate with the shared ring), so the weight's operand gets
// the deeper ring and the activations' the shallower one.
enum class WgmmaOperands {
  kSharedAB,           // A and B K-major in shared memory (the SS form), as packed if need be
  kRegistersB,         // kSwapAB: B row-major, B^T read into registers (the RS form)
  kSplitRegistersB,    // kSwapAB + kSplit3: the same, B^T split into 3xTF32 parts in registers
  kSplitRegistersBKMajor,  // kSwapAB + kSplit3 + kSwapKMajor: B column-major, split in registers
};

template <int BM_, int BN_, int kStages_, int kClusterM_, int kPromoteKTiles_ = 0,
          WgmmaOperands kOperands_ = WgmmaOperands::kSharedAB, int kStagesB_ = 0>
struct WgmmaConfig {
  static constexpr int BM = BM_, BN = BN_, kClusterM = kClusterM_;
  static constexpr int kPromoteKTiles = kPromoteKTiles_;
  static constexpr WgmmaOperands kOperands = kOperands_;
  static constexpr bool kSwapAB = kOperands != WgmmaOperands::kSharedAB;
  static constexpr bool kSplit3 = kOperands == WgmmaOperands::kSplitRegistersB ||
                                  kOperands == WgmmaOperands::kSplitRegistersBKMajor;
  static constexpr bool kSwapKMajor = kOperands == WgmmaOperands::kSplitRegistersBKMajor;
  // Tiles of the shared-memory operand per stage: its three parts, or one.
  static constexpr int kPartsB = kSplit3 ? 3 : 1;
  // One 128-byte swizzle atom of TF32 along K: the widest box a
  // CU_TENSOR_MAP_SWIZZLE_128B copy may have.
  static constexpr int BK = 32;
  static constexpr int kStages = kStages_;
  // B's slots: its own ring, or (kOwnStagesB false) the B half of A's slots.
  static constexpr bool kOwnStagesB = kStagesB_ > 0;
  static constexpr int kStagesB = kOwnStagesB ? kStagesB_ : kStages;
  static constexpr int kConsumers = BM / 64;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kStageBytesA = BM * BK * 4, kPartBytesB = BN * BK * 4;
  static constexpr int kStageBytesB = kPartsB * kPartBytesB;
  // The stride of A's slots, which hold B's tiles too unless kOwnStagesB.
  static constexpr int kStageBytes = kStageBytesA + (kOwnStagesB ? 0 : kStageBytesB);
  static constexpr int kTileBytes = kStages * kStageBytes + (kOwnStagesB ? kStagesB * kStageBytesB : 0);
  // A full and an empty mbarrier per slot of each ring.
  static constexpr int kBarriers = 2 * (kStages + (kOwnStagesB ? kStagesB : 0));
  // The epilogue stages C through shared memory in 64 x 32 chunks (one
  // 128-byte swizzle atom wide; with kSwapAB 32 rows x 64 columns of C, as
  // two 32 x 32 boxes), double-buffered per consumer warpgroup, and TMA
  // stores them: coalesced, clipped at the edges, and asynchronous, so
  // the consumers start the next tile while the stores drain.
  static constexpr int kEpilogueCols = 32;
  static constexpr int kEpilogueBufferBytes = 64 * kEpilogueCols * 4;
  static constexpr int kEpilogueBytes = kConsumers * 2 * kEpilogueBufferBytes;
  // Tiles, epilogue buffers and full/empty mbarriers, plus slack to align
  // the tiles to the 1024 bytes that the 128-byte swizzle pattern repeats over.
  static constexpr int kSmemBytes = kTileBytes + kEpilogueBytes + kBarriers * 8 + 1024;
  // Hopper's 227 KB per block, less room for the kernel's static shared
  // memory (a few words).
  static_assert(kSmemBytes <= 227 * 1024 - 256, "the configuration's shared memory does not fit");
  static_assert(BM % 64 == 0 && (BN == 256 || BN == 128 || (BN == 64 && kSwapAB)),
                "the consumer issues wgmma.m64n{BN}k8 (n64 in the RS form only)");
  static_assert(kPromoteKTiles == 0 || BN <= 128,
                "two sets of 64 x 256 accumulators do not fit a thread's registers");
  static_assert(kStageBytesA % 1024 == 0 && (BN / kClusterM) % 8 == 0,
                "every tile and multicast slice must start 1024-byte aligned");
  static_assert(!kSwapAB || BM == 128,
                "the register-operand mainloop gives each of two consumers 64 of C's columns");
  static_assert(!kSwapAB || (kPromoteKTiles == 0) == !kSplit3,
                "the register-operand mainloop promotes for 3xTF32 only");
  static_assert(!kOwnStagesB || kClusterM == 1,
                "B's own ring is released by this block's consumers only (no multicast)");
  static_assert(kStagesB_ == 0 || kStagesB_ >= 2,
                "a slot is released one k-tile late (one k-tile's MMAs stay in flight)");
  static_assert(!kOwnStagesB || !kSplit3,
                "the split mainloop waits on the shared ring's barriers only");
  static_assert(!kSplit3 || (kSwapAB && kPromoteKTiles == 1 && kClusterM == 1),
                "the split mainloop promotes every k-tile (its fragment sets are reused "
                "once a k-tile's MMAs retired), and loads its three parts unclustered");
  // Rows of C per TMA store box: a 64 x 32 chunk of one consumer's
  // accumulators, or with kSwapAB a 32 x 32 box, two of which (64 columns of
  // C) fill one epilogue buffer.
  static constexpr int kStoreBoxRows = kSwapAB ? 32 : 64;

  // Clusters covering an M x N output, each kClusterM tiles stacked along M.
  __host__ __device__ static constexpr int64_t cluster_tiles(int64_t M, int64_t N) {
    return ceil_div(M, BM * kClusterM) * ceil_div(N, BN);
  }
  // Threadblocks covering an M x N output: whole clusters.
  __host__ __device__ static constexpr int64_t tiles(int64_t M, int64_t N) {
    return cluster_tiles(M, N) * kClusterM;
  }
};

// 128x256x32, 2 consumer warpgroups of 64x256 (128 accumulators per thread),
// 4 stages of 48 KB and 32 KB of epilogue buffers: 225 KB of the H200's
// 227 KB per block; clusters of 2 along M. For M > 128.
using WgmmaLarge = WgmmaConfig<128, 256, 4, 2>;
// Decode-sized M (64 < M <= 128 and M <= 64): one tile row, no clusters (a
// cluster's second tile would lie entirely below M), and 128 columns rather
// than 256. These problems stream B from DRAM (split-K when the tiles alone
// leave SMs idle), and the narrower tile streams it faster: on the H200 at
// M = 128, N = K = 4096 the 128x256 tile's best split (8) took 49.7 us in the
// GEMM kernel, the 128x128 tile's (4) 28 us; at M = 32 the 64x256 tile 42 us,
// the 64x128 tile 22 us (plus ~4 us for the reduction in both).
// 128x128x32, 2 consumer warpgroups, 6 stages of 32 KB: 225 KB.
using WgmmaMedium = WgmmaConfig<128, 128, 6, 1>;
// 64x128x32, one consumer warpgroup, 8 stages of 24 KB: 209 KB.
using WgmmaNarrow = WgmmaConfig<64, 128, 8, 1>;

// 128x128x32, 6 stages of 32 KB, clusters of 2 along M: half the work per
// tile, for M > 128 shapes whose 128x256 tiles leave most of a last wave
// empty (4095x4097x4099: 544 tiles on 132 SMs = 4 full waves + 16 tiles,
// one of which is a single column wide).
using WgmmaSquare = WgmmaConfig<128, 128, 6, 2>;
// WgmmaLarge for `a @ b` with A and B row-major (kSwapAB): 128 columns x 256
// rows of C per tile, clusters of 2 along C's N sharing their A tile.
using WgmmaLargeSwapAB = WgmmaConfig<128, 256, 4, 2, 0, WgmmaOperands::kRegistersB>;
// WgmmaMedium's counterpart for `a @ b` at 64 < M <= 128: 128 columns x
// 128 rows of C per tile (rows past M are not loaded and their results not
// stored), 6 stages of 32 KB, no clusters.
using WgmmaMediumSwapAB = WgmmaConfig<128, 128, 6, 1, 0, WgmmaOperands::kRegistersB>;
// The same for M <= 64: 64 of C's rows per tile (wgmma.m64n64k8 in the RS
// form), half the MMAs and half the activation bytes per k-tile of the
// 128-row tile, 8 stages of 16 KB of B^T plus 8 KB of A: 225 KB. H200,
// 2026-12-01, x @ W, bench_decode (us, 128-row tile -> this one): M = 16
// 27.8 -> 27.4 (4096 x 4096), 72.8 -> 67.0 (4096 -> 14336), 81.2 -> 67.3
// (14336 -> 4096); M = 64 29.5 -> 29.1, 70.9 -> 66.9, 83.6 -> 71.5.
// (Clusters of 2 sharing the activations at 64 < M <= 128 did not gain:
// 31.7 -> 32.1, 86.7 -> 85.7, 79.8 -> 78.6.)
using WgmmaNarrowSwapAB = WgmmaConfig<128, 64, 8, 1, 0, WgmmaOperands::kRegistersB>;
// WgmmaMediumSwapAB where K is not split (dispatch.cu, swap_ab_choice):
// the weight (B^T, the A operand here) in 8 slots of 16 KB and the
// activations in 4 of their own, 128 KB of W in flight instead of 96. Each
// block then streams all of K from DRAM; split-K's short ranges keep the
// shared ring (this ring on every tile lost ~1 us on split 4096^2). H200,
// bench_decode, x @ W, M = 128, 4096 -> 14336: 82.7 -> 75.3 us in one A/B
// run, a few us over repeated runs (2026-12-02). 225 KB.
using WgmmaMediumSwapABRing = WgmmaConfig<128, 128, 8, 1, 0, WgmmaOperands::kRegistersB, 4>;
// 3xTF32 (precision "tf32x3"): 128x128x32 with accumulators promoted every
// 4 k-tiles (128 of K), 6 stages of 32 KB; clusters of 2 along M for M > 128.
using WgmmaPromotedLarge = WgmmaConfig<128, 128, 6, 2, 4>;
using WgmmaPromotedMedium = WgmmaConfig<128, 128, 6, 1, 4>;
// 3xTF32 `a @ b` (both row-major) at decode-sized M (<= 128), the weight B
// split in registers (kSplit3): WgmmaMediumSwapAB's tile, 3 stages of 16 KB
// of B^T plus 3 x 16 KB of A's parts, promoted every k-tile: 225 KB.
using WgmmaSplit3SwapAB = WgmmaConfig<128, 128, 3, 1, 1, WgmmaOperands::kSplitRegistersB>;
// The same for B column-major (`x @ W.T`, F.linear's weight [out, in]).
using WgmmaSplit3SwapABKMajor = WgmmaConfig<128, 128, 3, 1, 1, WgmmaOperands::kSplitRegistersBKMajor>;
// Both for M <= 64: 64 of C's rows per tile (wgmma.m64n64k8, half the MMAs
// of the 128-row tile, whose MMAs bound these problems), 4 stages of 16 KB
// of B^T plus 3 x 8 KB of A's parts: 193 KB.
using WgmmaSplit3SwapABNarrow = WgmmaConfig<128, 64, 4, 1, 1, WgmmaOperands::kSplitRegistersB>;
using WgmmaSplit3SwapABKMajorNarrow =
    WgmmaConfig<128, 64, 4, 1, 1, WgmmaOperands::kSplitRegistersBKMajor>;

// What launch_wgmma_gemm<Config> does for `problem` with `splits` on the
// current device: the workspace it needs (split-K's partial products, or
// the stream-K partial sums of a last wave that the work items fill only
// in part; see "Split-K and stream-K" in
// docs/design.md), whether it runs that wave stream-K, and
// whether it marks the weight's loads L2 evict-first (weight_read_once).
struct WgmmaPlan {
  size_t workspace_bytes = 0;
  bool stream_k = false;
  bool weight_evict_first = false;  // the weight's loads hinted L2 evict-first
};
template <class Config>
WgmmaPlan plan_wgmma_gemm(const GemmProblem& problem, int splits);

// Runs `problem` (both operands K-major, A row-major and B column-major, or
// with Config::kSwapAB both row-major, or with kSwapKMajor too A row-major
// and B column-major; all tma_compatible; with kSplit3, A is the
// PackSplit::kPartsAligned pack of the activations and lda its row length,
// while K stays the unsplit K) with configuration
// Config on a device of compute capability 9.0 (build with sm_90a). splits > 1 cuts K into that many
// ranges (split-K) whose partial products go to `partials` and are then
// summed in order. `partials`: partials_bytes of workspace (256-byte
// aligned), plan_wgmma_gemm's workspace_bytes; with less, split-K returns
// cudaErrorInvalidValue and stream-K is left out.
// Returns cudaErrorInvalidValue if a tensor map cannot be encoded.
template <class Config>
cudaError_t launch_wgmma_gemm(const GemmProblem& problem, int splits, float* partials,
                              size_t partials_bytes, cudaStream_t stream);

}  // namespace pygpukit
