// The arithmetic of the FP32-accurate product (precision "fp32") by the
// Ozaki scheme II on INT8 tensor cores, shared by its kernels (host and
// device). See "The FP32-accurate product" in docs/design.md.
//
// C = A @ B is computed as follows. Each row i of A is scaled by 2^mu_i and
// each column j of B by 2^nu_j, and truncated to integers A', B' chosen so
// that every |(A' B')_ij| < P / 8, P the product of n pairwise coprime
// moduli p_l <= 256. The residues of A' and B' modulo each p_l fit int8;
// one INT8 GEMM per modulus gives A' B' mod p_l, and the Chinese remainder
// theorem gives the exact integer A' B' back, which is rounded once to
// float and scaled by 2^(-mu_i - nu_j). The only error is the truncation of
// A and B; n is chosen per call, on the device, from the inputs.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace pygpukit::ozaki {

// Pairwise coprime, largest first: n moduli give P = p_0 ... p_{n-1}.
inline constexpr int kMaxModuli = 13;
inline constexpr int kModuli[kMaxModuli] = {256, 255, 253, 251, 247, 241, 239,
                                            233, 229, 227, 223, 217, 211};

// K of one INT32 accumulation: residues are at most 128 in magnitude, so
// 2^16 products stay below 2^30, and the running sum (reduced modulo p
// below p between chunks) below 2^31.
inline constexpr int64_t kChunkK = int64_t{1} << 16;

// What the kernels need to know of the moduli: per count n, P's bits and
// the scaling's target, and the CRT weights.
struct Moduli {
  int p[kMaxModuli];                  // kModuli, for device code
  double p_inv[kMaxModuli];           // 1 / p_l, rounded to nearest
  double capacity[kMaxModuli + 1];    // P of the first n moduli, rounded to nearest
  int h[kMaxModuli + 1];              // scaled rows' and columns' norms stay below 2^h
};
struct Crt {
  // W_l = P / p_l and W_l^-1 mod p_l: for residues r_l of C',
  // C' = sum_l W_l y_l - q P with y_l = (r_l W_l^-1) mod p_l in [-128, 127]
  // and q = round(sum_l y_l / p_l). W_l and P are held as high + low
  // doubles, high a multiple of 2^split with split the least such that
  // 8 P <= 2^(53 + split): every y_l high_l and q P's high part, and every
  // partial sum of them (at most 128 sum_l W_l + |q| P <= 8 P in magnitude,
  // checked below), is then a multiple of 2^split below 2^(53 + split),
  // exact in double; the low parts (< 2^split) and their sums are exact
  // where split <= 42 (n <= 11 moduli) and within n 2^(split - 42) of
  // exact otherwise, far below the truncation's error of about 2^h.
  double weight_high[kMaxModuli], weight_low[kMaxModuli];
  int weight_inverse[kMaxModuli];
  double product_high, product_low;  // P
};
struct Tables {
  Moduli moduli;
  Crt crt[kMaxModuli + 1];  // crt[n]: for the first n moduli
};

// The tables, at compile time: kTables for host code, device_tables for
// kernels (a __constant__ copy per file; a kernel parameter indexed at run
// time would be copied to the stack).
constexpr Tables make_tables() {
  using u128 = unsigned __int128;
  Tables t{};
  for (int l = 0; l < kMaxModuli; ++l) {
    t.moduli.p[l] = kModuli[l];
    t.moduli.p_inv[l] = 1.0 / kModuli[l];
  }
  for (int n = 1; n <= kMaxModuli; ++n) {
    u128 product = 1;
    for (int l = 0; l < n; ++l) product *= u128(kModuli[l]);
    t.moduli.capacity[n] = double(product);
    // The largest h with 2^(2h + 3) <= P: then |A' B'| < 2^(2h) <= P / 8.
    int h = 0;
    while (2 * (h + 1) + 3 < 128 && (u128(1) << (2 * (h + 1) + 3)) <= product) ++h;
    t.moduli.h[n] = h;
    Crt& crt = t.crt[n];
    int split = 0;
    while (split + 53 < 128 && (u128(1) << (split + 53)) < 8 * product) ++split;
    const auto high = [split](u128 x) { return (x >> split) << split; };
    crt.product_high = double(high(product));
    crt.product_low = double(product - high(product));
    for (int l = 0; l < n; ++l) {
      const u128 weight = product / u128(kModuli[l]);
      crt.weight_high[l] = double(high(weight));
      crt.weight_low[l] = double(weight - high(weight));
      const int w = int(weight % u128(kModuli[l]));
      int inverse = 1;
      while ((w * inverse) % kModuli[l] != 1) ++inverse;
      crt.weight_inverse[l] = inverse;
    }
  }
  return t;
}
inline constexpr Tables kTables = make_tables();

// The bound Crt relies on: 128 sum_l W_l <= 8 P, that is sum_l 1 / p_l <=
// 1 / 16, for every count of moduli (the largest count has the largest sum).
constexpr bool crt_sums_bounded() {
  double inverse_sum = 0.0;
  for (int l = 0; l < kMaxModuli; ++l) inverse_sum += 1.0 / kModuli[l];
  return 128.0 * inverse_sum <= 8.0 * (1.0 - 1e-12);
}
static_assert(crt_sums_bounded(), "the CRT's high parts would not be exact in double");
#if defined(__CUDACC__)
namespace {
__constant__ Tables device_tables = make_tables();
}  // namespace
#endif

#if defined(__CUDACC__)
#define PYGPUKIT_OZAKI_HD __host__ __device__ __forceinline__
#else
#define PYGPUKIT_OZAKI_HD inline
#endif

// What the number of moduli depends on besides K, over the rows of A and
// the columns of B: rho, the largest ||x||_2^2 / ||x||_1^2 (1 / K for equal
// magnitudes, 1 for a single nonzero), and tau, the smaller of A's and B's
// largest outlier ratio: a row's largest entry against the mean of its
// nonzeros other than the 8 largest (up to 8 outlier channels do not hide
// each other; 1 where there are no others).
struct Spread {
  double rho = 0.0, tau = 1.0;
};

// The number of moduli: the fewest n with
//   log2 P >= 50.5 + 2 log2 K + log2 rho + 2 max(0, log2 tau - 8),
// or kMaxModuli + 1 if none suffices.
// Why: the truncation error of row i is about 2^(-h) ||a_i||_2 ||b_j||_1 per
// side, against FP32's 2^-24 ||a_i||_1 ||b_j||_1 / K for (|A| |B|)_ij where
// the magnitudes are spread evenly (the rho term). Where a row of A and a
// column of B both hold an outlier D times their other entries, at
// different k, (|A| |B|)_ij is only about D times theirs while the
// truncation follows D^2: h must grow by log2 D, and log2 P by twice that
// (the tau term; tau near 5 for Gaussian rows). The constants were set on
// an exact CPU emulation of the scheme over the accuracy suite's kinds of
// input and outliers of 2^4..2^24 in both operands (docs/design.md): it
// never chose fewer moduli than the fewest whose errors, norm-wise and
// worst-element, were FP32's or below. Below K = 64
// the sums are too short for the averages to hold (Gaussian inputs at
// K = 2..7 needed 9 moduli for the worst element), so at least
// kShortKModuli are taken.
inline constexpr int64_t kShortK = 64;
inline constexpr int kShortKModuli = 9;
PYGPUKIT_OZAKI_HD int moduli_needed(const Moduli& m, const Spread& s, int64_t K) {
  const double kd = double(K);
  double need = ldexp(s.rho * kd * kd, 50) * 1.4142135623730951;  // 2^50.5
  const double outlier = s.tau * 0x1p-8;
  if (outlier > 1.0) need *= outlier * outlier;
  for (int n = K <= kShortK ? kShortKModuli : 1; n <= kMaxModuli; ++n)
    if (m.capacity[n] >= need) return n;
  return kMaxModuli + 1;
}

// An exponent e with sqrt(sum_squares) < 2^e, for a row's or column's sum of
// squares accumulated in double (whose relative error, K 2^-53, the factor
// covers); kZeroRow for an all-zero row.
inline constexpr int kZeroRow = -100000;
PYGPUKIT_OZAKI_HD int norm_exponent(double sum_squares) {
  if (!(sum_squares > 0.0)) return kZeroRow;
  int e = 0;
  frexp(sqrt(sum_squares * (1.0 + 0x1p-30)), &e);  // value = f 2^e, 0.5 <= f < 1
  return e;
}

// 2^e as a double, for -1022 <= e <= 1023.
PYGPUKIT_OZAKI_HD double pow2(int e) { return ldexp(1.0, e); }

// The residue of the integer x (|x| < 2^50, held exactly in a double: a
// scaled input, or an INT32 accumulator) modulo p, in [-128, 127]: x - p round(x / p), the quotient rounded to
// nearest with the 1.5 * 2^52 shift. The quotient may be one off where
// x / p lies within 2^-9 of a half-integer; the residue is then p/2 + 1 at
// most, and brought back into int8's range.
PYGPUKIT_OZAKI_HD int residue(double x, int p, double p_inv) {
  constexpr double kShift = 0x1.8p52;
  const double q = fma(x, p_inv, kShift) - kShift;
  // The residue's integer from the low word of (residue + shift), which
  // is cheaper than a conversion instruction.
  const double shifted = fma(-q, double(p), x) + kShift;
#if defined(__CUDA_ARCH__)
  int r = __double2loint(shifted);
#else
  uint64_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  int r = int(int32_t(uint32_t(bits)));
#endif
  if (r > 127) r -= p;
  if (r < -128) r += p;
  return r;
}

}  // namespace pygpukit::ozaki
