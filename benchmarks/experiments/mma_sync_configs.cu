// The mma.sync kernel template in one tile configuration (-DCBM= -DCBN= -DCBK=
// -DCWM= -DCWN= -DCSTAGES= [-DMINB= -DINSIDE=]), forced, timed next to cuBLAS
// TF32 in the same process: row-major A with column-major B ("tn") and with
// row-major B ("nn"), at the large shapes, the "small" ones or a list
// "MxNxK,MxNxK,...", one JSON line per shape; diff = ||ours - cuBLAS|| /
// ||cuBLAS|| up to 4096 rows. Built and run by mma_sync_configs.sh.
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cmath>
#include <array>
#include <cstring>
#include <cublas_v2.h>
#include "cuda/mma_sync/mma_sync_gemm.cuh"
#include "cuda/kernel_setup.cpp"

using namespace pygpukit;
#ifndef MINB
#define MINB 1
#endif
#ifndef INSIDE
#define INSIDE 1
#endif
using Cfg = MmaSyncConfig<CBM, CBN, CBK, CWM, CWN, CSTAGES, 0, MINB, INSIDE>;

__global__ void fill(float* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    unsigned x = unsigned(i) * 2654435761u ^ seed; x ^= x >> 13; x *= 0x5bd1e995; x ^= x >> 15;
    p[i] = (x & 0xffff) / 32768.0f - 1.0f;
  }
}

template <class F> double time_ms(F f) {
  for (int i = 0; i < 3; ++i) f();
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  std::vector<float> ms;
  for (int i = 0; i < 15; ++i) { cudaEventRecord(e0); f(); cudaEventRecord(e1); cudaEventSynchronize(e1);
    float t; cudaEventElapsedTime(&t, e0, e1); ms.push_back(t); }
  std::sort(ms.begin(), ms.end()); return ms[ms.size() / 2];
}

double rel_diff(const float* x, const float* y, size_t n) {
  std::vector<float> a(n), b(n); cudaMemcpy(a.data(), x, n * 4, cudaMemcpyDeviceToHost); cudaMemcpy(b.data(), y, n * 4, cudaMemcpyDeviceToHost);
  double num = 0, den = 0; for (size_t i = 0; i < n; ++i) { double d = double(a[i]) - b[i]; num += d * d; den += double(b[i]) * b[i]; if (std::isnan(a[i])) return 1e9; }
  return std::sqrt(num / den);
}

int main(int argc, char** argv) {
  std::vector<std::array<int, 3>> shapes = {{4096, 4096, 4096}, {8192, 8192, 8192}, {8192, 14336, 4096}, {8192, 4096, 14336}};
  if (argc > 1 && !strcmp(argv[1], "small")) shapes = {{2048, 2048, 2048}, {1024, 1024, 4096}, {4096, 4096, 4096}};
  if (argc > 1 && strchr(argv[1], 'x')) {  // "MxNxK,MxNxK,..." (at most 8192 x 14336 elements per operand)
    shapes.clear();
    for (const char* s = argv[1]; *s;) {
      std::array<int, 3> v{};
      int used = 0;
      if (sscanf(s, "%dx%dx%d%n", &v[0], &v[1], &v[2], &used) != 3) return 2;
      shapes.push_back(v);
      s += used;
      if (*s == ',') ++s;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    fprintf(stderr, "mma_sync_configs: no CUDA GPU\n");
    return 1;
  }
  size_t cap = size_t(8192) * 14336;
  float *A, *B, *C, *R;
  cudaMalloc(&A, cap * 4); cudaMalloc(&B, cap * 4); cudaMalloc(&C, cap * 4); cudaMalloc(&R, cap * 4);
  fill<<<1024, 256>>>(A, cap, 1); fill<<<1024, 256>>>(B, cap, 2);
  cublasHandle_t h; cublasCreate(&h);
  for (auto& s : shapes) {
    int M = s[0], N = s[1], K = s[2];
    double out[2][2]; double err[2];
    for (int lay = 0; lay < 2; ++lay) {  // 0: tn (B col-major [N][K]), 1: nn (B row-major [K][N])
      GemmProblem p; p.M = M; p.N = N; p.K = K; p.A = A; p.lda = K; p.B = B; p.C = C; p.ldc = N;
      p.layout_b = lay == 0 ? Layout::kColMajor : Layout::kRowMajor; p.ldb = lay == 0 ? K : N;
      cudaMemset(C, 0xff, size_t(M) * N * 4);
      auto ours = [&] { if (lay == 0) launch_mma_sync_gemm<Cfg, Layout::kRowMajor, Layout::kColMajor, true>(p, 0);
                        else launch_mma_sync_gemm<Cfg, Layout::kRowMajor, Layout::kRowMajor, true>(p, 0); };
      // cuBLAS column-major: C^T[N][M] = B^T A^T
      float one = 1, zero = 0;
      auto cub = [&] { cublasGemmEx(h, lay == 0 ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B, CUDA_R_32F, lay == 0 ? K : N,
                                    A, CUDA_R_32F, K, &zero, R, CUDA_R_32F, N, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT); };
      double t_ours = time_ms(ours), t_cub = time_ms(cub);
      cudaError_t e = cudaDeviceSynchronize();
      double f = 2.0 * M * N * K / 1e9;
      out[lay][0] = f / t_ours; out[lay][1] = f / t_cub;
      err[lay] = e != cudaSuccess ? -1 : (M <= 4096 ? rel_diff(C, R, size_t(M) * N) : 0);
    }
    printf("{\"cfg\": \"%dx%dx%d_w%dx%d_s%d_m%d_i%d\", \"shape\": \"%dx%dx%d\", \"tn\": %.1f, \"tn_cublas\": %.1f, \"nn\": %.1f, \"nn_cublas\": %.1f, \"diff_tn\": %.2e, \"diff_nn\": %.2e}\n",
           CBM, CBN, CBK, CWM, CWN, CSTAGES, MINB, INSIDE, M, N, K, out[0][0], out[0][1], out[1][0], out[1][1], err[0], err[1]);
  }
}
