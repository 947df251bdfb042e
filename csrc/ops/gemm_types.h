// Enumerations shared by the operator layer (CPU and CUDA) and the kernels.
// Free of torch and CUDA headers, so a CPU-only build can use it too.
#pragma once

namespace pygpukit {

// Storage order of a matrix operand. For A[M, K]: row-major is K-major
// (element (m, k) at m * lda + k), column-major is M-major ((m, k) at
// k * lda + m). For B[K, N]: row-major is N-major, column-major is K-major
// (how nn.Linear stores its weight[N, K]).
enum class Layout : int { kRowMajor = 0, kColMajor = 1 };

// Elementwise function applied in registers before the single store of C.
enum class Activation : int { kNone = 0, kRelu, kGelu, kGeluTanh, kSilu };

// What a GEMM computes with.
//   kTF32:   inputs rounded to TF32 (10 explicit mantissa bits, round to
//            nearest), products accumulated in FP32 (GPU) or better (CPU).
//   kIEEE:   plain FP32 inputs and FP32 fused multiply-adds; no tensor cores.
//   kTF32x3: 3xTF32 ("big + small" split of each input, after CUTLASS's
//            fast FP32 emulation and NVIDIA's TF32 white papers): x = big +
//            small with big = tf32(x), small = tf32(x - big), and
//            a*b ~ a_small*b_big + a_big*b_small + a_big*b_big on TF32
//            tensor cores, accumulated in FP32 (the small*small term,
//            ~2^-22 relative, is dropped). The tensor cores' accumulation is
//            not RN, so the kernels add partial sums into FP32 registers
//            (every 128 of K on the large tiles; every 32 on the skinny
//            kernel and the decode weight-split tiles): on the H200 3.6e-7 at 4096^3,
//            below cuBLAS FP32's 1.15e-6 (one unpromoted chain gave 9.6e-6).
//   kFP32:   FP32-accurate, by the fastest method that is: on Hopper the
//            Ozaki scheme II on INT8 tensor cores (cuda/ozaki/ozaki_scheme.h)
//            for large products, elsewhere plain FP32 (dispatch.cu,
//            runs_ozaki); the CPU accumulates in float64.
enum class Precision : int { kTF32 = 0, kIEEE = 1, kTF32x3 = 2, kFP32 = 3 };

// The precisions' names, for error messages.
inline constexpr const char* kPrecisionNames = "'tf32', 'tf32x3', 'fp32', 'ieee'";

// The kernel family the dispatcher is made to use (pygpukit_torch.force_kernel,
// PYGPUKIT_KERNEL), in the order of kForceableKernels' names.
enum class ForcedKernel : int {
  kAuto = 0, kWgmma, kWgmmaSwapAB, kMmaSync, kMmaSyncLarge, kMmaSyncMedium, kMmaSyncSmall,
  kMmaSyncCompact, kSkinny, kGemv, kFma, kOzaki
};
inline constexpr const char* kForceableKernels[] = {
    "auto", "wgmma", "wgmma_swap_ab", "mma_sync", "mma_sync_large", "mma_sync_medium",
    "mma_sync_small", "mma_sync_compact", "skinny", "gemv", "fma", "ozaki"};

}  // namespace pygpukit
