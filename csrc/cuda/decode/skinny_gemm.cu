// The decode-sized-M TF32 GEMM (skinny_gemm.h): mma.sync.m16n8k8 fed
// straight from global memory, B streamed once with 16-byte loads, K split
// over the warps of a CTA and summed in shared memory in a fixed order. See
// "The skinny kernel" in docs/design.md.
#include "cuda/decode/skinny_gemm.h"


#include "cuda/common/epilogue.cuh"
#include "cuda/launch_util.h"
#include "cuda/common/load_chunk.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/tf32_split.cuh"
#include "cuda/common/tile_raster.cuh"

namespace pygpukit {
namespace {

// What one lane holds of one load block at k0: the 16-byte chunks h = 0, 1
// at k = k0 + 16h + 4t (t = lane % 4) of B rows n0 + 8j + g and of A rows g,
// g + 8 (g = lane / 4). Per B row the 4 lanes of a group cover k0 .. k0 + 31.
template <class Cfg>
struct LoadBlock {
  uint4 b[Cfg::kMmaN][2];
  uint4 a[2][2];
};

// Loads the A chunks of the block at k0 into `a`. a_row points at the
// lane's first chunk (k = 4t) of its rows, nullptr for rows past M, which
// stay zero and are never read (M = 1 reads one row of A, not 16). A is read
// with L1-allocating loads into a register ring: a CTA covers the whole of
// K, so its A is M x K floats (256 KB at M = 16, K = 4096), too much to
// stage in shared memory, and a 16-column CTA reads as many bytes of A as
// of B at M = 16 (a 32-column one half as many); L1 serves the re-reads of the CTAs
// that share an SM (they walk K in step), L2 the rest, which is A's ~1 MB
// at most.
template <bool kTail>
__device__ __forceinline__ void load_a_block(uint4 (&a)[2][2], const float* const (&a_row)[2],
                                             int64_t k0, int64_t K, int t) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t k = k0 + 16 * h;         // offset from the row pointers
    const int64_t left = K - (k + 4 * t);  // elements of this chunk inside K
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (a_row[i] == nullptr) {
        a[i][h] = make_uint4(0, 0, 0, 0);
      } else {
        a[i][h] = kTail ? load_tail_chunk(a_row[i] + k, left)
                        : __ldg(reinterpret_cast<const uint4*>(a_row[i] + k));
      }
    }
  }
}

// B (the weight, read exactly once) is streamed through a ring of load
// blocks per warp in shared memory, filled by cp.async.cg (L2 only, so the
// stream does not evict A from L1): shared memory holds more bytes in
// flight than registers can (a two-block register ring of A and B used all
// 128 registers that two CTAs per SM allow). A slot is private to its warp
// and each lane reads back only the chunks it copied, so the lane's own
// cp.async.wait_group is all the synchronization needed. Slot layout: chunk
// c = 2j + h of every lane, [c][lane], 16 bytes each, which makes the
// copies and the reads back conflict-free. The copies are marked L2
// evict-first: W is read once (per 16-row block, where forced blocks of
// rows run one after another), and in normal priority it ran slower, likely
// by evicting lines that are read again (A's rows, which CTAs re-read from L2;
// H200, graph-timed, 16 rows: 4096 -> 4096 23.4 -> 21.7 us, 4096 -> 2048
// 19.1 -> 15.4 us; 8 rows, 14336 -> 4096: 67.0 -> 64.2 us; 2026-12-02).
// SkinnyConfig::kRingBytes is this layout's size: kSlices rings of kStagesB
// slots of kChunksB x 32 lanes x 16 bytes.
template <class Cfg>
constexpr int kChunksB = 2 * Cfg::kMmaN;

// Copies the B chunks of `block` into `slot` and commits one cp.async
// group, an empty one past the last block (so a fixed wait count always
// means "this block has landed"). Chunks past K are zero-filled; rows past
// N (null row pointers) read nothing.
template <class Cfg>
__device__ __forceinline__ void issue_b_block(uint4* slot, const float* const (&b_row)[Cfg::kMmaN],
                                              const float* any, int64_t block, int64_t last,
                                              int64_t K, int t, int lane, uint64_t l2_policy) {
  if (block < last) {
    const int64_t k0 = block * Cfg::kBlockK;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t left = K - (k0 + 16 * h + 4 * t);  // elements of the chunk inside K
      const int in_k = left > 0 ? 4 * int(left < 4 ? left : 4) : 0;
#pragma unroll
      for (int j = 0; j < Cfg::kMmaN; ++j) {
        const int bytes = b_row[j] != nullptr ? in_k : 0;
        // src must be a legal address even when nothing is read.
        ptx::cp_async_16(slot + (2 * j + h) * 32 + lane, bytes ? b_row[j] + k0 + 16 * h : any,
                         bytes, l2_policy);
      }
    }
  }
  ptx::cp_async_commit();
}

// One load block rounded to TF32 and laid out as m16n8k8 fragments, two k8
// steps per chunk h: a[h][e] (A rows g, g + 8) and b[j][h][e] (B row n0 +
// 8j + g) of step e. The fragments want, per lane, A(g, t), A(g+8, t),
// A(g, t+4), A(g+8, t+4) and B(t, g), B(t+4, g): elements 0, 1 of the lane's
// chunk serve as k = t, t + 4 of step 0, elements 2, 3 as those of step 1.
// One permutation of k for both operands, which the sum over k cannot see,
// turns 16-byte chunks into fragments with no shuffles.
template <class Cfg>
struct Fragments {
  uint32_t a[2][2][4];
  uint32_t b[Cfg::kMmaN][2][2][2];
};

// Rounding here, once per loaded element (no element is shared between
// lanes). Into fresh registers, so that the next loads into the ring slot
// can be issued before this block's MMAs. For 3xTF32 (kSplit3) the values
// stay unrounded: mma_block splits them.
template <class Cfg, bool kSplit3>
__device__ __forceinline__ Fragments<Cfg> to_fragments(const LoadBlock<Cfg>& f) {
  auto round_to_tf32 = [](uint32_t bits) { return kSplit3 ? bits : ptx::round_to_tf32(bits); };
  Fragments<Cfg> r;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint4 a0 = f.a[0][h], a1 = f.a[1][h];  // rows g and g + 8
    const uint32_t a_lo[4] = {a0.x, a1.x, a0.y, a1.y}, a_hi[4] = {a0.z, a1.z, a0.w, a1.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      r.a[h][0][i] = round_to_tf32(a_lo[i]);
      r.a[h][1][i] = round_to_tf32(a_hi[i]);
    }
#pragma unroll
    for (int j = 0; j < Cfg::kMmaN; ++j) {
      const uint4 b = f.b[j][h];
      r.b[j][h][0][0] = round_to_tf32(b.x);
      r.b[j][h][0][1] = round_to_tf32(b.y);
      r.b[j][h][1][0] = round_to_tf32(b.z);
      r.b[j][h][1][1] = round_to_tf32(b.w);
    }
  }
  return r;
}

// The 3xTF32 MMAs of one block: each k8 step splits its fragments
// (tf32_split.cuh) and runs a_small*b_big + a_big*b_small + a_big*b_big,
// small terms first. kPlain: every value of the block passed
// tf32_split_is_plain.
template <class Cfg, bool kPlain>
__device__ __forceinline__ void mma_block_split3(const Fragments<Cfg>& f,
                                                 float (&acc)[Cfg::kMmaN][4]) {
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      uint32_t a_big[4], a_small[4], a_corr[4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        tf32_split_operand<kPlain>(f.a[h][e][i], a_big[i], a_small[i], a_corr[i]);
#pragma unroll
      for (int j = 0; j < Cfg::kMmaN; ++j) {
        uint32_t b_big[2], b_small[2], b_corr[2];
#pragma unroll
        for (int i = 0; i < 2; ++i)
          tf32_split_operand<kPlain>(f.b[j][h][e][i], b_big[i], b_small[i], b_corr[i]);
        ptx::mma_m16n8k8_tf32(acc[j], a_small, b_corr);
        ptx::mma_m16n8k8_tf32(acc[j], a_corr, b_small);
        ptx::mma_m16n8k8_tf32(acc[j], a_big, b_big);
      }
    }
}

// The four k8 steps of one block, in the same order for every block. With
// kSplit3 (3xTF32) the fragments are split in registers, so the pack that
// the other kernels need (three copies of W per call) is not needed. The
// split's special cases (Inf, NaN, values within 2^-12 of FLT_MAX) are
// tested once per block and warp, one compare per value, and the short
// split runs where none occurs: the full split per value was ~20
// instructions, most of the loop (H200, 16 x 4096 x 4096: 53 -> 32.5 us).
template <class Cfg, bool kSplit3>
__device__ __forceinline__ void mma_block(const Fragments<Cfg>& f, float (&acc)[Cfg::kMmaN][4]) {
  if constexpr (kSplit3) {
    bool plain = true;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
#pragma unroll
        for (int i = 0; i < 4; ++i) plain &= tf32_split_is_plain(__uint_as_float(f.a[h][e][i]));
#pragma unroll
        for (int j = 0; j < Cfg::kMmaN; ++j)
#pragma unroll
          for (int i = 0; i < 2; ++i) plain &= tf32_split_is_plain(__uint_as_float(f.b[j][h][e][i]));
      }
    // mma.sync is .aligned: the whole warp must take the same path.
    if (__all_sync(0xFFFFFFFFu, plain)) {
      mma_block_split3<Cfg, true>(f, acc);
    } else {
      mma_block_split3<Cfg, false>(f, acc);
    }
  } else {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < 2; ++e)
#pragma unroll
        for (int j = 0; j < Cfg::kMmaN; ++j) ptx::mma_m16n8k8_tf32(acc[j], f.a[h][e], f.b[j][h][e]);
  }
}

// Two CTAs per SM (at most 128 registers).
template <class Cfg, bool kSplit3>
__global__ void __launch_bounds__(Cfg::kThreads, 2) skinny_gemm_kernel(const GemmProblem p) {
  // Each K-slice's partial 16 x kBlockN sums, [slice][row][column].
  __shared__ float partial[Cfg::kSlices][Cfg::kMaxM][Cfg::kBlockN];
  // The B rings, Cfg::kStagesB slots per warp.
  extern __shared__ uint4 rings[];

  ptx::programmatic_launch_start();  // launch_util.h, launch_kernel
  const int lane = threadIdx.x % 32, slice = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;  // fragment row group / thread in group
  const int64_t n0 = int64_t(blockIdx.x) * Cfg::kBlockN;
  uint4* const ring = rings + slice * Cfg::kStagesB * kChunksB<Cfg> * 32;

  const float* b_row[Cfg::kMmaN];
#pragma unroll
  for (int j = 0; j < Cfg::kMmaN; ++j) {
    const int64_t n = n0 + 8 * j + g;
    b_row[j] = n < p.N ? p.B + n * p.ldb + 4 * t : nullptr;
  }
  const float* a_row[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int m = g + 8 * i;
    a_row[i] = m < p.M ? p.A + m * p.lda + 4 * t : nullptr;
  }

  // This warp's K-slice, load blocks [first, last), the slices as even as
  // the block count allows. Only the last block of K can be partial.
  const int64_t blocks = ceil_div(p.K, Cfg::kBlockK);
  const int64_t first = blocks * slice / Cfg::kSlices;
  const int64_t last = blocks * (slice + 1) / Cfg::kSlices;
  auto slot = [&](int64_t block) { return ring + (block % Cfg::kStagesB) * kChunksB<Cfg> * 32; };
  const uint64_t weight_policy = ptx::l2_policy_evict_first();
  auto issue_b = [&](int64_t block) {
    issue_b_block<Cfg>(slot(block), b_row, p.B, block, last, p.K, t, lane, weight_policy);
  };
  auto load_a = [&](uint4 (&a)[2][2], int64_t block) {
    const int64_t k0 = block * Cfg::kBlockK;
    if (k0 + Cfg::kBlockK <= p.K) {
      load_a_block<false>(a, a_row, k0, p.K, t);
    } else {
      load_a_block<true>(a, a_row, k0, p.K, t);
    }
  };

  float acc[Cfg::kMmaN][4] = {};
  // B: Cfg::kStagesB - 1 blocks requested ahead of the one being multiplied. A:
  // a register ring of kStages blocks, block i + kStages requested as soon
  // as block i's registers are consumed.
#pragma unroll
  for (int s = 0; s < Cfg::kStagesB - 1; ++s) issue_b(first + s);
  uint4 ring_a[Cfg::kStages][2][2];
#pragma unroll
  for (int s = 0; s < Cfg::kStages; ++s)
    if (first + s < last) load_a(ring_a[s], first + s);
  for (int64_t block = first; block < last; block += Cfg::kStages) {
#pragma unroll
    for (int s = 0; s < Cfg::kStages; ++s) {
      if (block + s < last) {
        ptx::cp_async_wait<Cfg::kStagesB - 2>();  // this lane's copies of block + s landed
        const uint4* const in = slot(block + s);
        LoadBlock<Cfg> f;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int j = 0; j < Cfg::kMmaN; ++j) f.b[j][h] = in[(2 * j + h) * 32 + lane];
#pragma unroll
          for (int i = 0; i < 2; ++i) f.a[i][h] = ring_a[s][i][h];
        }
        const Fragments<Cfg> frag = to_fragments<Cfg, kSplit3>(f);
        // Refill the B slot read one block ago (its values are in
        // registers) and this A ring entry.
        issue_b(block + s + Cfg::kStagesB - 1);
        if (block + s + Cfg::kStages < last) load_a(ring_a[s], block + s + Cfg::kStages);
        // Each block's MMAs start from zero and are added to acc with FP32
        // adds: the tensor cores' accumulation is not rounded to nearest and
        // its error grows with the chain (see WgmmaConfig::kPromoteKTiles),
        // which matters for 3xTF32 and its 3K-long slices.
        float block_sum[Cfg::kMmaN][4] = {};
        mma_block<Cfg, kSplit3>(frag, block_sum);
#pragma unroll
        for (int j = 0; j < Cfg::kMmaN; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[j][e] += block_sum[j][e];
      }
    }
  }

  // C fragment: acc[j] = (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1) of n8 tile j.
#pragma unroll
  for (int j = 0; j < Cfg::kMmaN; ++j) {
    const int col = 8 * j + 2 * t;
    *reinterpret_cast<float2*>(&partial[slice][g][col]) = make_float2(acc[j][0], acc[j][1]);
    *reinterpret_cast<float2*>(&partial[slice][g + 8][col]) = make_float2(acc[j][2], acc[j][3]);
  }
  __syncthreads();

  // One thread per output element: the slices added in the order 0, 1, ...
  // (the same every run: bitwise reproducible), then the epilogue and the
  // only store; consecutive threads take consecutive columns.
  for (int e = threadIdx.x; e < Cfg::kMaxM * Cfg::kBlockN; e += Cfg::kThreads) {
    const int row = e / Cfg::kBlockN, col = e % Cfg::kBlockN;
    const int64_t n = n0 + col;
    if (row >= p.M || n >= p.N) continue;
    float sum = partial[0][row][col];
#pragma unroll
    for (int s = 1; s < Cfg::kSlices; ++s) sum += partial[s][row][col];
    p.C[row * p.ldc + n] = epilogue_value(p.epilogue, sum, n);
  }
}

template <class Cfg, bool kSplit3>
cudaError_t launch(const GemmProblem& p, cudaStream_t stream) {
  return launch_kernel<skinny_gemm_kernel<Cfg, kSplit3>>(dim3(unsigned(Cfg::ctas(p.N))),
                                                         dim3(Cfg::kThreads),
                                                         KernelNeeds{Cfg::kRingBytes}, stream, p);
}

}  // namespace

cudaError_t launch_skinny_gemm(const GemmProblem& p, bool wide, bool split3,
                               cudaStream_t stream) {
  if (p.M < 1 || p.M > kSkinnyMaxM) return cudaErrorInvalidValue;
  return launch_row_blocks(p, SkinnyNarrow::kMaxM, [&](const GemmProblem& block) {
    return split3 ? launch<SkinnyNarrow, true>(block, stream)
           : wide ? launch<SkinnyWide, false>(block, stream)
                  : launch<SkinnyNarrow, false>(block, stream);
  });
}

}  // namespace pygpukit
