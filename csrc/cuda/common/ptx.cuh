// Inline-PTX building blocks for sm_80 and newer: the mma.sync TF32 path and
// the skinny kernel (cp.async, ldmatrix, mma.sync, TF32 rounding), and the
// programmatic-launch prologue of every kernel launch_kernel starts.
// PTX ISA references are to the CUDA 13.0 PTX ISA manual.
#pragma once

#include <cstdint>

namespace pygpukit::ptx {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Programmatic dependent launch (griddepcontrol, 9.7.13.x; sm_90 and newer:
// compiled to nothing for older targets, whose code kernel_setup.h's
// KernelReady::programmatic never lets launch programmatically). Where every
// kernel that launch_kernel starts first touches global memory. Launched
// with cudaLaunchAttributeProgrammaticStreamSerialization, a kernel may
// start while the kernel before it in the stream still runs:
// griddepcontrol.wait blocks until that kernel has completed and its memory
// operations are visible (at once when there is none), so nothing before
// this call may touch memory that kernel writes or reads. Then
// griddepcontrol.launch_dependents lets the next such kernel start (once
// every block of this grid has issued it or exited); that kernel waits for
// all of this grid in turn.
__device__ __forceinline__ void programmatic_launch_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// 16-byte global->shared copy that bypasses L1 (cp.async.cg, PTX ISA 9.7.9.25).
// Only `src_bytes` (0, 4, 8, 12 or 16) are read; the rest of the 16 bytes is
// zero-filled, which is how partial chunks at the M/N/K edges are predicated.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem,
                                            int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                   smem_addr(smem)),
               "l"(gmem), "r"(src_bytes));
}

// The same copy with an L2 cache hint (.L2::cache_hint): `l2_policy` from
// l2_policy_evict_first, for data read exactly once.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, int src_bytes,
                                            uint64_t l2_policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(
                   smem_addr(smem)),
               "l"(gmem), "r"(src_bytes), "l"(l2_policy));
}

// The same copy with all 16 bytes read (no zero-fill operand to compute).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem));
}

// 4-byte variant for operands whose base pointer or leading dimension is not
// 16-byte aligned. src_bytes is 0 (zero-fill) or 4.
__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem,
                                           int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(
                   smem_addr(smem)),
               "l"(gmem), "r"(src_bytes));
}

// An L2 cache policy (createpolicy, 9.7.9.18) under which every line an
// access brings into L2 is among the first evicted: for data read once.
__device__ __forceinline__ uint64_t l2_policy_evict_first() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}

// Waits until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Four 8x8 b16 matrices = four 8-row x 16-byte blocks. For 32-bit data each
// lane gets word (lane % 4) of row (lane / 4) of each block, which is exactly
// the m16n8k8 TF32 fragment layout for K-major operands. Lanes 8j..8j+7 give
// the row addresses of block j.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4],
                                            const void* smem) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(smem_addr(smem)));
}

// Rounds an FP32 value to TF32, round to nearest with ties away from zero,
// in the form the tensor core consumes. `cvt.rna.tf32.f32` compiles on sm_80
// and sm_90 to FSETP(|x| < inf) + IADD 0x1000 + LOP3 (mask the 13 low bits);
// the tensor core ignores those 13 bits anyway, so we emit the first two and
// skip the mask: bit-identical products, one instruction less per element.
// Inf and NaN pass unchanged; values that round past FLT_MAX become Inf.
__device__ __forceinline__ uint32_t round_to_tf32(uint32_t bits) {
  return (fabsf(__uint_as_float(bits)) < __int_as_float(0x7f800000))
             ? bits + 0x1000u
             : bits;
}

// A fragment register rounded to TF32 just before mma.sync reads it. From
// sm_90 on, `cvt.rn.tf32.f32` is one instruction (F2FP.TF32.F32.PACK_B:
// round to nearest, ties to even, Inf and NaN kept); before it, the two of
// round_to_tf32 (ties away). The two differ only on exact ties.
__device__ __forceinline__ uint32_t round_fragment_to_tf32(uint32_t bits) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t rounded;
  asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(rounded) : "f"(__uint_as_float(bits)));
  return rounded;
#else
  return round_to_tf32(bits);
#endif
}

// One 16-byte global store. Written as a float4 assignment next to a
// predicated fallback of four scalar stores, ptxas merged the two into the
// scalar stores (the mma.sync epilogue, sm_90a).
__device__ __forceinline__ void store_global_v4(float* dst, float x, float y, float z, float w) {
  asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "f"(x), "f"(y), "f"(z), "f"(w)
               : "memory");
}

// D = A * B + D for one 16x8x8 TF32 tile (PTX ISA 9.7.14.5.1.1).
// A fragment: a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4);
// B fragment: b0 (k=t, n=g), b1 (k=t+4, n=g);
// C fragment: c0,c1 (g, 2t..2t+1), c2,c3 (g+8, 2t..2t+1); g = lane/4, t = lane%4.
// Not volatile: it only reads and writes registers, and leaving the compiler
// free to move it is what lets ptxas overlap the next k-step's ldmatrix with
// this one's MMAs (with `volatile`, the source order of the fragment loads
// and MMAs was kept, and the H200 ran 57 TFLOP/s at 4096^3, stalled on
// fixed-latency dependencies with the tensor pipe mostly idle).
__device__ __forceinline__ void mma_m16n8k8_tf32(float (&d)[4],
                                                 const uint32_t (&a)[4],
                                                 const uint32_t (&b)[2]) {
  asm(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

}  // namespace pygpukit::ptx
