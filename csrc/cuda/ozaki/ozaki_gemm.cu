#include "cuda/ozaki/ozaki_gemm.h"

#include <limits>

#include "cuda/common/int_math.h"
#include "cuda/launch_util.h"
#include "cuda/ozaki/ozaki_kernels.h"

namespace pygpukit {
namespace {

using ozaki::Rows;

// A's rows and B's columns as rows of length K.
Rows rows_of_a(const GemmProblem& p) {
  const bool row_major = p.layout_a == Layout::kRowMajor;
  const bool batched = p.batch > 1 && p.batch_stride_a != 0;
  return Rows{p.A, p.M, p.K, row_major ? p.lda : 1, row_major ? 1 : p.lda, batched ? p.batch : 1,
              batched ? p.batch_stride_a : 0};
}
Rows rows_of_b(const GemmProblem& p) {
  const bool col_major = p.layout_b == Layout::kColMajor;
  const bool batched = p.batch > 1 && p.batch_stride_b != 0;
  return Rows{p.B, p.N, p.K, col_major ? p.ldb : 1, col_major ? 1 : p.ldb, batched ? p.batch : 1,
              batched ? p.batch_stride_b : 0};
}

// Where each part of the workspace lies, 256-byte aligned.
struct WorkspacePlan {
  int n_max = 0;
  int64_t ld = 0, ldc = 0;  // residue rows of A and B (K), of C (N): multiples of 16
  size_t exponents_a = 0, exponents_b = 0, residues_a = 0, residues_b = 0, residues_c = 0, total = 0;
};
constexpr size_t kHeaderBytes = 256;  // the DeviceSpread, the moduli count
static_assert(sizeof(ozaki::DeviceSpread) + sizeof(int) <= kHeaderBytes, "the header holds both");

WorkspacePlan plan(const GemmProblem& p) {
  WorkspacePlan w;
  const Rows a = rows_of_a(p), b = rows_of_b(p);
  // Outliers can call for any count (ozaki::moduli_needed).
  w.n_max = ozaki::kMaxModuli;
  w.ld = round_up(p.K, 16);
  w.ldc = round_up(p.N, 16);
  size_t at = kHeaderBytes;
  auto take = [&](int64_t bytes) {
    const size_t here = at;
    at += size_t(round_up(bytes, 256));
    return here;
  };
  w.exponents_a = take(a.batch * a.rows * 4);
  w.exponents_b = take(b.batch * b.rows * 4);
  w.residues_a = take(w.n_max * a.batch * a.rows * w.ld);
  w.residues_b = take(w.n_max * b.batch * b.rows * w.ld);
  w.residues_c = take(w.n_max * p.batch * p.M * w.ldc);
  w.total = at;
  return w;
}

}  // namespace

bool ozaki_runs(const GemmProblem& p, int cc_major, int cc_minor) {
  constexpr int64_t kMaxCoordinate = std::numeric_limits<int32_t>::max();
  constexpr int64_t kMaxGridZ = 65535;  // the GEMM's grid: one z per modulus and batch entry
  if (!ozaki::int8_gemm_available() || cc_major != 9 || cc_minor != 0) return false;
  // K whose evenly spread inputs the moduli cover (rho = 1: a dominant
  // entry; outliers past what 13 moduli cover lose accuracy, docs/precision.md).
  const bool k_covered = ozaki::moduli_needed(ozaki::kTables.moduli, ozaki::Spread{1.0, 1.0}, p.K) <=
                         ozaki::kMaxModuli;
  return k_covered && ozaki::kMaxModuli * p.batch <= kMaxGridZ && p.M <= ozaki::kMaxRows &&
         p.N <= ozaki::kMaxRows && p.K <= kMaxCoordinate;
}

size_t ozaki_workspace_bytes(const GemmProblem& p) { return plan(p).total; }

cudaError_t run_ozaki_gemm(const GemmProblem& p, void* workspace, size_t workspace_bytes,
                           cudaStream_t stream) {
  const WorkspacePlan w = plan(p);
  if (workspace_bytes < w.total)
    return step_result(cudaErrorInvalidValue, "workspace too small for the FP32-accurate product");
  auto* ws = static_cast<uint8_t*>(workspace);
  auto* spread = reinterpret_cast<ozaki::DeviceSpread*>(ws);
  auto* count = reinterpret_cast<int*>(ws + sizeof(ozaki::DeviceSpread));
  auto* exponents_a = reinterpret_cast<int32_t*>(ws + w.exponents_a);
  auto* exponents_b = reinterpret_cast<int32_t*>(ws + w.exponents_b);
  auto* residues_a = reinterpret_cast<int8_t*>(ws + w.residues_a);
  auto* residues_b = reinterpret_cast<int8_t*>(ws + w.residues_b);
  auto* residues_c = reinterpret_cast<int8_t*>(ws + w.residues_c);
  const Rows a = rows_of_a(p), b = rows_of_b(p);
  cudaError_t err =
      step_result(cudaMemsetAsync(spread, 0, sizeof(*spread), stream), "cudaMemsetAsync");
  if (err == cudaSuccess) err = ozaki::launch_row_stats(a, 0, exponents_a, spread, stream);
  if (err == cudaSuccess) err = ozaki::launch_row_stats(b, 1, exponents_b, spread, stream);
  if (err == cudaSuccess)
    err = ozaki::launch_split(a, exponents_a, spread, w.n_max, residues_a, w.ld, count, stream);
  if (err == cudaSuccess)
    err = ozaki::launch_split(b, exponents_b, spread, w.n_max, residues_b, w.ld, nullptr, stream);
  if (err == cudaSuccess) {
    ozaki::Int8Gemm g;
    g.M = p.M;
    g.N = p.N;
    g.K = p.K;
    g.ld = w.ld;
    g.batch = int(p.batch);
    g.batch_a = int(a.batch);
    g.batch_b = int(b.batch);
    g.n_max = w.n_max;
    g.a = residues_a;
    g.b = residues_b;
    g.c = residues_c;
    g.ldc = w.ldc;
    g.count = count;
    err = ozaki::launch_int8_gemm(g, stream);
  }
  if (err == cudaSuccess) {
    ozaki::Reconstruct r;
    r.a = a;
    r.b = b;
    r.exponents_a = exponents_a;
    r.exponents_b = exponents_b;
    r.residues = residues_c;
    r.ld_residues = w.ldc;
    r.count = count;
    r.c = p.C;
    r.ldc = p.ldc;
    r.batch_stride_c = p.batch_stride_c;
    r.M = p.M;
    r.N = p.N;
    r.batch = int(p.batch);
    r.n_max = w.n_max;
    r.epilogue = p.epilogue;
    err = ozaki::launch_reconstruct(r, stream);
  }
  return err;
}

std::string describe_ozaki(const GemmProblem& p) {
  return "ozaki (FP32-accurate: INT8 wgmma 128x256x128 per modulus, up to " +
         std::to_string(plan(p).n_max) + " moduli chosen on the device from the inputs)";
}

}  // namespace pygpukit
