// The Box-Muller tables of the CUDA input generator (box_muller.h) against the host draws: the
// device looks the radius and angle up instead of calling CUDA's logf/cosf/sinf, so a lookup
// must give the host's normal_pair bit for bit, at the table edges too.
#include <gtest/gtest.h>

#include <vector>

#include "ops/box_muller.h"
#include "ops/moe_gemm_inputs.h"

namespace atrex::problems::ops {
namespace {

void expect_same_pair(const BoxMullerTables& t, uint64_t seed, uint64_t stream, uint64_t p) {
  float a, b, ta, tb;
  normal_pair(seed, stream, p, a, b);
  t.pair(counter_hash(seed, stream, p), ta, tb);
  ASSERT_EQ(num::float_bits(a), num::float_bits(ta)) << "pair " << p;
  ASSERT_EQ(num::float_bits(b), num::float_bits(tb)) << "pair " << p;
}

TEST(BoxMullerTables, LookupsEqualTheHostDrawsBitForBit) {
  std::vector<float> radius, angle;
  build_box_muller_tables(radius, angle);
  const BoxMullerTables t{radius.data(), angle.data()};
  for (uint64_t p = 0; p < 200000; ++p) expect_same_pair(t, 7, 0x5eed0001ull, p * 7919);
  // The radius index edges: u = 0, the last exact u, the first high entry, u1 = 1 (radius 0).
  for (uint32_t u :
       {0u, kBoxMullerLowU - 1, kBoxMullerLowU, kBoxMullerLowU + 1, 0xfffffffeu, 0xffffffffu}) {
    for (uint64_t k : {uint64_t{0}, uint64_t{1} << 23, (uint64_t{1} << 24) - 1}) {
      const uint64_t h = (k << 40) | u;
      const float r = box_muller_radius(box_muller_u1(u));
      float c, s, a, b;
      box_muller_angle(box_muller_u2(h), c, s);
      t.pair(h, a, b);
      EXPECT_EQ(num::float_bits(r * c), num::float_bits(a)) << "u " << u << " k " << k;
      EXPECT_EQ(num::float_bits(r * s), num::float_bits(b)) << "u " << u << " k " << k;
    }
  }
  EXPECT_EQ(box_muller_radius_index(0xffffffffu), kBoxMullerRadiusEntries - 1);
  EXPECT_EQ(radius.back(), 0.0f);  // logf(1) = 0
}

}  // namespace
}  // namespace atrex::problems::ops
