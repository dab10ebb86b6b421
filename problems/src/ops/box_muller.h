// The Box-Muller transform of the fp8 block-quantised inputs (moe_gemm_inputs.h normal_pair) on
// both backends. The host draws call the C library's logf, sqrtf, cosf and sinf, whose last bits
// differ from CUDA's own functions, so device code does not recompute them: it looks the host
// results up in tables built once per process from the same out-of-line host functions. Every
// float u1 that normal_pair forms has a radius entry (2^23 for u < 2^23, where u1 = (u + 0.5)
// 2^-32 exactly, then one per float in [2^-9, 1]), and each of the 2^24 angles has its (cos,
// sin) pair, so host and device draws agree bit for bit on any machine, whatever its libm.
#pragma once

#include <cstdint>
#include <vector>

#include "atrex/problems/numeric.h"

#if defined(__CUDA_ARCH__)
#define ATREX_BM_FADD(a, b) __fadd_rn(a, b)
#define ATREX_BM_FMUL(a, b) __fmul_rn(a, b)
#else
#define ATREX_BM_FADD(a, b) ((a) + (b))
#define ATREX_BM_FMUL(a, b) ((a) * (b))
#endif

namespace atrex::problems::ops {

// sqrtf(-2 logf(u1)) and (cosf, sinf)(6.2831853f u2), defined out of line (box_muller.cpp) so
// the host draws and the device tables run the same compiled code.
float box_muller_radius(float u1);
void box_muller_angle(float u2, float& c, float& s);

// The two uniforms of normal_pair from one 64-bit hash: u1 in (0, 1] from the low 32 bits,
// u2 in [0, 1) from the top 24.
ATREX_HD float box_muller_u1(uint32_t u) {
  return ATREX_BM_FMUL(ATREX_BM_FADD(static_cast<float>(u), 0.5f), 2.3283064365386963e-10f);
}
ATREX_HD float box_muller_u2(uint64_t h) {
  return static_cast<float>(h >> 40) * 5.9604644775390625e-08f;
}

inline constexpr uint32_t kBoxMullerLowU = 1u << 23;         // u below: indexed by u
inline constexpr uint32_t kBoxMullerHighBits = 0x3b000000u;  // bits of 2^-9, the first high entry
inline constexpr int64_t kBoxMullerRadiusEntries = (int64_t{10} << 23) + 1;  // up to bits of 1.0f
inline constexpr int64_t kBoxMullerAngles = int64_t{1} << 24;

ATREX_HD int64_t box_muller_radius_index(uint32_t u) {
  if (u < kBoxMullerLowU) return u;  // u + 0.5 < 2^23 is exact, u1 = (u + 0.5) 2^-32
  return kBoxMullerLowU +
         static_cast<int64_t>(num::float_bits(box_muller_u1(u)) - kBoxMullerHighBits);
}

// Lookup form of normal_pair's transform (host or device pointers).
struct BoxMullerTables {
  const float* radius;  // [kBoxMullerRadiusEntries]
  const float* angle;   // [2 * kBoxMullerAngles]: cos, sin
  // Standard normals a (element 2p) and b (element 2p + 1) of the pair whose hash is h.
  ATREX_HD void pair(uint64_t h, float& a, float& b) const {
    const float r = radius[box_muller_radius_index(static_cast<uint32_t>(h))];
    const uint64_t k = h >> 40;
    a = ATREX_BM_FMUL(r, angle[2 * k]);
    b = ATREX_BM_FMUL(r, angle[2 * k + 1]);
  }
};

// Fills both tables on the host (parallel; about 10^8 logf and 1.7e7 sincosf).
void build_box_muller_tables(std::vector<float>& radius, std::vector<float>& angle);

}  // namespace atrex::problems::ops
