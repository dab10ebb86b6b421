// Reference of block_scaled_mm (alibaba/atrex-bench data/block_scaled_mm/reference.py, read
// 2026-12-01): a [M, K] fp8 e4m3 with per-(row, K-group) scales a_scales [M, K/gk], b [N, K]
// fp8 e4m3 with per-(N-group, K-group) scales b_scales [N/gn, K/gk]; out [M, N] fp32 =
//   sum over K-groups kb of fp32(fp32(dot_kb(a[m], b[n]) * a_scales[m, kb]) * b_scales[n/gn, kb]).
// torch computes dot_kb in fp32 (bmm); here it is exact (fp8 products are integers times 2^-18,
// summed in int64) and rounded to fp32 once. The sum over K-groups is fp64, rounded once.
#pragma once

#include <cstdint>

#include "atrex/problems/operator.h"
#include "moe_gemm_common.h"

namespace atrex::problems::ops {

// One thread per output element, n fastest: a warp shares one row of a and reads 32 rows of b,
// which stays L2-resident (N x K bytes).
struct BlockScaledMmElement {
  const uint8_t* a;
  const uint8_t* b;
  const float* a_scales;
  const float* b_scales;
  float* out;
  int64_t n_cols;  // N
  int64_t k;
  int64_t group_n;
  int64_t group_k;  // a multiple of 4 (resolve checks), so bytes are read four at a time
  ATREX_HD void operator()(int64_t i) const {
    const int64_t m = i / n_cols, n = i % n_cols, groups = k / group_k;
    const uint8_t* ar = a + m * k;
    const uint8_t* br = b + n * k;
    const float* as = a_scales + m * groups;
    const float* bs = b_scales + (n / group_n) * groups;
    double acc = 0;
    for (int64_t kb = 0; kb < groups; ++kb) {
      int64_t dot = 0;  // in units of 2^-18
      for (int64_t c = kb * group_k; c < (kb + 1) * group_k; c += 4) {
        const uint32_t av = load_u32(ar + c), bv = load_u32(br + c);
        for (int q = 0; q < 4; ++q) {
          dot += static_cast<int64_t>(fp8_units(static_cast<uint8_t>(av >> (8 * q)))) *
                 fp8_units(static_cast<uint8_t>(bv >> (8 * q)));
        }
      }
      const float d = static_cast<float>(static_cast<double>(dot) * 3.814697265625e-06);  // 2^-18
      acc += (d * as[kb]) * bs[kb];
    }
    out[i] = static_cast<float>(acc);
  }
};

template <class Exec>
void block_scaled_mm_reference(const Exec& ex, const ResolvedShape& s, const void* const* in,
                               void* const* out) {
  const int64_t m = s.int_param("m"), n = s.int_param("n");
  ex.for_each(m * n, BlockScaledMmElement{
                         static_cast<const uint8_t*>(in[0]), static_cast<const uint8_t*>(in[1]),
                         static_cast<const float*>(in[2]), static_cast<const float*>(in[3]),
                         static_cast<float*>(out[0]), n, s.int_param("k"), s.int_param("group_n"),
                         s.int_param("group_k")});
}

}  // namespace atrex::problems::ops
