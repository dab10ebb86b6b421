#include "box_muller.h"

#include <cmath>

#include "atrex/problems/operator.h"

namespace atrex::problems::ops {

float box_muller_radius(float u1) { return sqrtf(-2.0f * logf(u1)); }

void box_muller_angle(float u2, float& c, float& s) {
  c = cosf(6.2831853f * u2);
  s = sinf(6.2831853f * u2);
}

void build_box_muller_tables(std::vector<float>& radius, std::vector<float>& angle) {
  radius.resize(static_cast<size_t>(kBoxMullerRadiusEntries));
  angle.resize(static_cast<size_t>(2 * kBoxMullerAngles));
  parallel_for_cpu(kBoxMullerRadiusEntries, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float u1 =
          i < kBoxMullerLowU
              ? box_muller_u1(static_cast<uint32_t>(i))
              : num::bits_float(kBoxMullerHighBits + static_cast<uint32_t>(i - kBoxMullerLowU));
      radius[static_cast<size_t>(i)] = box_muller_radius(u1);
    }
  });
  parallel_for_cpu(kBoxMullerAngles, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      box_muller_angle(static_cast<float>(k) * 5.9604644775390625e-08f,
                       angle[static_cast<size_t>(2 * k)], angle[static_cast<size_t>(2 * k + 1)]);
    }
  });
}

}  // namespace atrex::problems::ops
