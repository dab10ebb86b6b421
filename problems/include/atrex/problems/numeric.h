// Host/device numeric helpers shared by the CPU and CUDA references and input generators:
// bf16/fp16 rounding exactly as CUDA's __float2bfloat16_rn / __float2half_rn define it
// (round to nearest, ties to even; NaN stays NaN), and a counter-based random generator so
// the same (seed, tensor, element) gives the same value on every backend and thread layout.
// Plain C++ (no STL) so nvcc can compile it into device code.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define ATREX_HD __host__ __device__ inline
#else
#define ATREX_HD inline
#endif

namespace atrex::num {

ATREX_HD uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
ATREX_HD float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// bfloat16 stored as its 16 bits.
ATREX_HD float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }
ATREX_HD uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return static_cast<uint16_t>(u >> 16);
}
// Rounds a float to the nearest bf16 value and back (models a bf16 tensor op's output).
ATREX_HD float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

// IEEE binary16 stored as its 16 bits.
ATREX_HD float fp16_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    if (man == 0) return bits_float(sign);
    float v = static_cast<float>(man) * 5.9604644775390625e-08f;  // 2^-24
    return sign ? -v : v;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (man << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
}
ATREX_HD uint16_t float_to_fp16(float f) {
  uint32_t u = float_bits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {                                               // subnormal or zero
    float a = bits_float(abs);
    // Scale so the subnormal step (2^-24) becomes 1, then round half to even.
    float scaled = a * 16777216.0f;
    uint32_t r = static_cast<uint32_t>(scaled);
    float frac = scaled - static_cast<float>(r);
    if (frac > 0.5f || (frac == 0.5f && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t lsb = (abs >> 13) & 1u;
  abs += 0xfffu + lsb;
  return static_cast<uint16_t>(sign | (((abs >> 23) - 112u) << 10) | ((abs >> 13) & 0x3ffu));
}
ATREX_HD float round_fp16(float f) { return fp16_to_float(float_to_fp16(f)); }

// fp8 e4m3 ("fn": no infinities, one NaN pattern per sign; max finite 448) stored as a byte.
// float -> fp8 rounds to nearest even like torch's `.to(torch.float8_e4m3fn)` (c10
// fp8e4m3fn_from_fp32_value): magnitudes >= 480 (halfway past 448 and up) become NaN (0x7f);
// quantisation kernels clamp to ±448 first, where this agrees with CUDA's
// __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3).
ATREX_HD float fp8e4m3_to_float(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t exp = (v >> 3) & 0xfu;
  const uint32_t man = v & 0x7u;
  if (exp == 0xfu && man == 0x7u) return bits_float(sign | 0x7fc00000u);  // NaN
  if (exp == 0) {
    const float m = static_cast<float>(man) * 0.001953125f;  // man * 2^-9
    return sign ? -m : m;
  }
  return bits_float(sign | ((exp + 120u) << 23) | (man << 20));
}
ATREX_HD uint8_t float_to_fp8e4m3(float f) {
  const uint32_t u = float_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x43f00000u) return static_cast<uint8_t>(sign | 0x7fu);  // >= 480 or NaN/inf -> NaN
  if (abs < 0x3c800000u) {                                            // below 2^-6: subnormal range
    // Round abs / 2^-9 to an integer, half to even (0..8; 8 is the smallest normal 2^-6).
    const float scaled = bits_float(abs) * 512.0f;
    uint32_t r = static_cast<uint32_t>(scaled);
    const float frac = scaled - static_cast<float>(r);
    if (frac > 0.5f || (frac == 0.5f && (r & 1u))) ++r;
    return static_cast<uint8_t>(sign | r);
  }
  uint32_t a = abs + 0x7ffffu + ((abs >> 20) & 1u);  // round mantissa to 3 bits, ties to even
  a &= 0xfff00000u;
  const uint32_t exp = (a >> 23) - 120u;
  return static_cast<uint8_t>(sign | (exp << 3) | ((a >> 20) & 0x7u));
}
ATREX_HD float round_fp8e4m3(float f) { return fp8e4m3_to_float(float_to_fp8e4m3(f)); }

// SplitMix64 finaliser (Steele, Lea, Flood 2014): a bijective 64-bit mixer.
ATREX_HD uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform double in (0, 1] for element `i` of stream `stream` under `seed`.
ATREX_HD double uniform_open0(uint64_t seed, uint64_t stream, uint64_t i) {
  uint64_t h = mix64(seed ^ mix64(stream * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull) ^
                     mix64(i + 0x1234567ull));
  return (static_cast<double>(h >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

// Standard normal for element `i` (Box–Muller over two counter draws).
ATREX_HD double standard_normal(uint64_t seed, uint64_t stream, uint64_t i) {
  double u1 = uniform_open0(seed, stream, 2 * i);
  double u2 = uniform_open0(seed, stream, 2 * i + 1);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

}  // namespace atrex::num
