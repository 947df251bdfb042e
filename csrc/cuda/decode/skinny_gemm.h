// The decode-sized-M TF32 GEMM ("skinny"): C = epilogue(A @ B) for at most
// 16 rows of A per launch (up to 64 in blocks of 16), both operands K-major (x @ weight.T of nn.Linear), with B
// streamed from global memory into mma.sync fragments exactly once. Its
// configuration and launcher; the kernel is in skinny_gemm.cu, the rule
// that picks it in dispatch.cu.
#pragma once

#include <cstdint>

#include "cuda/gemm_problem.h"
#include "cuda/common/int_math.h"

namespace pygpukit {

// One CTA computes all M (<= kMaxM) rows of kBlockN output columns over the
// whole of K: its kSlices warps each sum one K-slice of those columns with
// m16n8k8 MMAs, and the slices are added in shared memory in a fixed order.
template <int kMmaN_, int kStagesB_>
struct SkinnyConfig {
  // Rows of one m16n8k8 tile: the largest M the kernel serves.
  static constexpr int kMaxM = 16;
  // n8 tiles per warp: every A fragment loaded feeds this many MMAs. A CTA
  // reads all of A (M x K) for kBlockN columns of B, so at M = 16 a 16-column
  // CTA reads as many bytes of A as of B.
  static constexpr int kMmaN = kMmaN_;
  static constexpr int kBlockN = 8 * kMmaN;  // output columns per CTA
  // Warps per CTA, one K-slice each; two CTAs per SM.
  static constexpr int kSlices = 8;
  static constexpr int kThreads = 32 * kSlices;
  // K per load block: the 4 lanes of a B row read 2 x 16 bytes each, 128
  // contiguous bytes, one whole cache line per row and block.
  static constexpr int kBlockK = 32;
  // Load blocks of A in flight per warp, in a register ring.
  static constexpr int kStages = 2;
  // Load blocks of B per warp in a shared-memory ring filled by cp.async
  // (kStagesB - 1 of them in flight): kStagesB x kMmaN x 8 KB per CTA.
  static constexpr int kStagesB = kStagesB_;
  // Shared memory per CTA: the B rings (dynamic; 16 bytes per lane, chunk
  // and slot, skinny_gemm.cu) and the slices' partial sums (static).
  static constexpr int kRingBytes = kSlices * kStagesB * (2 * kMmaN) * 32 * 16;
  static constexpr int kSmemBytes = kRingBytes + kSlices * kMaxM * kBlockN * 4;

  static constexpr int64_t ctas(int64_t N) { return ceil_div(N, kBlockN); }
};

// 16 columns per CTA, 4 stages of B (64 KB of ring). At N = 4096 that is
// 256 CTAs, two per SM. H200, graph-timed device time at M = 1 (4096x4096,
// 14336x4096, 4096x14336): 20.4, 65.4, 65.1 us (76-84% of 4.3 TB/s) at 4
// stages; 21.4-72.2 at 2, 21.9-67.7 at 6; 21.2-71.3 us with B in the
// register ring too. At M = 16 the ring costs 3-7% against that register
// ring (23.8 vs 22.7 us at 4096x4096): the shared memory it takes leaves
// less L1 for A's re-reads.
using SkinnyNarrow = SkinnyConfig<2, 4>;
// 32 columns per CTA, 2 stages (the same 64 KB ring per CTA; 32 KB in flight
// against the narrow tile's 48 KB): half of A's re-reads per byte of B. It
// pays when it still gives every SM two CTAs: H200, graph-timed, 14336x4096 at M = 8 and 16: 65.5 and 68.6 us
// (83%, 80% of 4.3 TB/s) against the narrow tile's 74.9 and 81.2, equal at
// M = 1 (64.2 vs 64.0); but with N = 4096 (128 CTAs, one per SM) 23.3-26.8
// against 19.7-23.4 us. A 16-warp CTA of 32 columns (one per SM, the same
// warps per SM as two narrow CTAs) took 21.5-24.6 us there.
using SkinnyWide = SkinnyConfig<4, 2>;

// Rows of A per call: more than SkinnyConfig::kMaxM (16) run in blocks of
// 16 rows, one launch and pass over B each; only when forced (on Hopper,
// 3xTF32 at 17-64 rows runs the wgmma kernel that splits B in registers,
// which reads B once for all rows).
constexpr int kSkinnyMaxM = 4 * SkinnyNarrow::kMaxM;
static_assert(SkinnyWide::kMaxM == SkinnyNarrow::kMaxM, "one block height for both tiles");

// Requires batch == 1, 1 <= M <= kSkinnyMaxM, N, K >= 1, A row-major and B
// column-major (layout fields are not read: A(m, k) at A[m * lda + k],
// B(k, n) at B[n * ldb + k]), A, B 16-byte aligned and lda, ldb multiples of
// 4. Any K (a zero-filled tail), N, ldc and epilogue. Returns
// cudaErrorInvalidValue for M out of range. Deterministic: the
// K-slices are always added in the same order, with no atomics. wide: the
// SkinnyWide tile, else SkinnyNarrow. split3: 3xTF32, each operand split
// into big and small TF32 parts in registers (tf32_split.cuh) and three MMAs
// per k8 step, from the unsplit operands; always on the narrow tile (the
// wide one's registers do not hold the split parts without spilling).
cudaError_t launch_skinny_gemm(const GemmProblem& problem, bool wide, bool split3,
                               cudaStream_t stream);

}  // namespace pygpukit
