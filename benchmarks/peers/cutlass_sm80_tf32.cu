// A benchmark peer, not part of the product: CUTLASS 2.x's sm80 TF32 GEMM
// (cutlass::gemm::device::Gemm, mma.sync with round-to-nearest TF32 inputs),
// the best-known kernel of the kind our portable path is, built against
// CUTLASS's headers in one tile configuration per build:
//   nvcc -O3 -std=c++17 -arch=sm_90 -I$CUTLASS/include -I$CUTLASS/tools/util/include \
//     -DBM=128 -DBN=256 -DBK=32 -DWM=64 -DWN=64 -DWK=32 -DSTAGES=3 cutlass_sm80_tf32.cu
// Run with shapes "MxNxK:layout,..." (layout "nn": B row-major, "nt": B
// column-major; A row-major), it prints one JSON line per shape with the
// median milliseconds of 30 CUDA-event-timed calls after 5 warm-up calls,
// or "ms": null where this configuration cannot run the shape. Like the
// benchmark suite's own timings, the calls take turns over input sets whose
// A and B together exceed three times the L2 cache.
// `python -m benchmarks mma_sync --cutlass DIR` builds and runs it.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "cutlass/gemm/device/gemm.h"

__global__ void fill(float* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    unsigned x = unsigned(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995;
    x ^= x >> 15;
    p[i] = (x & 0xffff) / 32768.0f - 1.0f;
  }
}

template <class LayoutB>
double median_ms(int M, int N, int K, const std::vector<const float*>& A, const std::vector<const float*>& B,
                 float* C) {
  using Gemm = cutlass::gemm::device::Gemm<
      float, cutlass::layout::RowMajor, float, LayoutB, float, cutlass::layout::RowMajor, float,
      cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80, cutlass::gemm::GemmShape<BM, BN, BK>,
      cutlass::gemm::GemmShape<WM, WN, WK>, cutlass::gemm::GemmShape<16, 8, 8>,
      cutlass::epilogue::thread::LinearCombination<float, 4, float, float>,
      cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<8>, STAGES>;
  const int ldb = std::is_same<LayoutB, cutlass::layout::RowMajor>::value ? N : K;
  std::vector<Gemm> gemms(A.size());
  for (size_t i = 0; i < A.size(); ++i) {
    typename Gemm::Arguments args({M, N, K}, {const_cast<float*>(A[i]), K},
                                  {const_cast<float*>(B[i]), ldb}, {C, N}, {C, N}, {1.f, 0.f});
    if (gemms[i].can_implement(args) != cutlass::Status::kSuccess) return -1;
    if (gemms[i].initialize(args, nullptr) != cutlass::Status::kSuccess) return -1;
  }
  size_t turn = 0;
  auto call = [&] { gemms[turn++ % gemms.size()].run(); };
  for (int i = 0; i < 5; ++i) call();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> ms;
  for (int i = 0; i < 30; ++i) {
    cudaEventRecord(start);
    call();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float t = 0;
    cudaEventElapsedTime(&t, start, stop);
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (cudaGetLastError() != cudaSuccess) return -1;
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s MxNxK:layout[,MxNxK:layout...]   (layout nn or nt)\n", argv[0]);
    return 2;
  }
  struct Shape { int M, N, K; char layout[3]; };
  std::vector<Shape> shapes;
  for (const char* s = argv[1]; *s;) {
    Shape v{};
    int used = 0;
    if (sscanf(s, "%dx%dx%d:%2[nt]%n", &v.M, &v.N, &v.K, v.layout, &used) != 4 ||
        (strcmp(v.layout, "nn") && strcmp(v.layout, "nt"))) {
      fprintf(stderr, "bad shape list at '%s'\n", s);
      return 2;
    }
    shapes.push_back(v);
    s += used;
    if (*s == ',') ++s;
  }
  int l2_bytes = 0;
  cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, 0);
  for (const Shape& v : shapes) {
    const size_t a_floats = size_t(v.M) * v.K, b_floats = size_t(v.K) * v.N;
    const size_t set_bytes = 4 * (a_floats + b_floats);
    const size_t sets = std::max<size_t>(1, (3 * size_t(l2_bytes) + set_bytes - 1) / set_bytes);
    std::vector<const float*> A, B;
    std::vector<float*> owned;
    float* C = nullptr;
    bool ok = cudaMalloc(&C, 4 * size_t(v.M) * v.N) == cudaSuccess;
    for (size_t i = 0; ok && i < sets; ++i) {
      float *a = nullptr, *b = nullptr;
      ok = cudaMalloc(&a, 4 * a_floats) == cudaSuccess && cudaMalloc(&b, 4 * b_floats) == cudaSuccess;
      if (a) owned.push_back(a);
      if (b) owned.push_back(b);
      if (!ok) break;
      fill<<<1024, 256>>>(a, a_floats, unsigned(2 * i + 1));
      fill<<<1024, 256>>>(b, b_floats, unsigned(2 * i + 2));
      A.push_back(a);
      B.push_back(b);
    }
    if (!ok) {
      fprintf(stderr, "out of GPU memory\n");
      return 1;
    }
    const double ms = strcmp(v.layout, "nn") == 0
                          ? median_ms<cutlass::layout::RowMajor>(v.M, v.N, v.K, A, B, C)
                          : median_ms<cutlass::layout::ColumnMajor>(v.M, v.N, v.K, A, B, C);
    for (float* ptr : owned) cudaFree(ptr);
    cudaFree(C);
    char value[32];
    snprintf(value, sizeof value, ms > 0 ? "%.5f" : "null", ms);
    printf("{\"config\": \"%dx%dx%d warps %dx%dx%d stages %d\", \"M\": %d, \"N\": %d, \"K\": %d, "
           "\"layout\": \"%s\", \"ms\": %s, \"input_sets\": %zu}\n",
           BM, BN, BK, WM, WN, WK, STAGES, v.M, v.N, v.K, v.layout, value, sets);
    fflush(stdout);
  }
  return 0;
}
