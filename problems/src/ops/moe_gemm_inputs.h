// Structured input generators of the moe_gemm operators (host only), after the Atrex-Bench
// input.py of each operator (read 2026-12-01). Tensors that input.py derives from one random
// draw (fp8 weights and their block scales; routing ids and weights) draw it from one shared
// stream, so each generator recomputes the same values independently of the call order (the
// block scales come from a cache of the fp8 tensor's draw when it went first: BlockScaleCache).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <mutex>
#include <numeric>
#include <utility>
#include <vector>

#include "atrex/problems/numeric.h"
#include "atrex/problems/operator.h"
#include "box_muller.h"

namespace atrex::problems::ops {

constexpr float kFp8Max = 448.0f;  // torch.finfo(torch.float8_e4m3fn).max

ATREX_HD uint64_t counter_hash(uint64_t seed, uint64_t stream, uint64_t i) {
  return num::mix64(seed ^ num::mix64(stream * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull) ^
                    num::mix64(i + 0x1234567ull));
}

// Standard normals of elements 2p and 2p+1 (Box-Muller in fp32 on one 64-bit hash, as curand's
// randn does: the tails stop near 6.7 sigma). Half the cost of num::standard_normal, which
// matters for the multi-GB fp8 weight tensors. The libm calls are out of line (box_muller.h) so
// that the CUDA generator (moe_gemm_inputs_cuda.cu) can look their results up bit for bit.
inline void normal_pair(uint64_t seed, uint64_t stream, uint64_t p, float& a, float& b) {
  const uint64_t h = counter_hash(seed, stream, p);
  const float r = box_muller_radius(box_muller_u1(static_cast<uint32_t>(h)));  // u1 in (0, 1]
  float c, s;
  box_muller_angle(box_muller_u2(h), c, s);  // u2 in [0, 1)
  a = r * c;
  b = r * s;
}
inline float normal_at(uint64_t seed, uint64_t stream, uint64_t i) {
  float a, b;
  normal_pair(seed, stream, i / 2, a, b);
  return (i & 1) ? b : a;
}
// Uniform in [0, 1) (torch.rand).
inline double uniform_at(uint64_t seed, uint64_t stream, uint64_t i) {
  return 1.0 - num::uniform_open0(seed, stream, i);
}

// One randn-derived matrix [rows, cols] and its block quantisation to fp8 e4m3, the
// `_block_quant` of the input.py files: scale = max / 448 per [block_r, block_c] block,
// q = fp8(clamp(x / scale, -448, 448)). Variants: fp8_blockscale_fused_moe draws bf16 randn
// (times `mul`, rounded to bf16 again) and floors |x|max at 1e-12; block_scaled_mm draws fp32
// randn, floors the scale at 1e-10, and scales b by its *signed* max (input.py's b_max is
// amax(dim) of the raw values, not of their magnitudes).
struct BlockQuantSource {
  uint64_t seed;
  uint64_t stream;
  int64_t rows;
  int64_t cols;
  int64_t block_r;
  int64_t block_c;
  bool bf16 = false;
  float mul = 1.0f;
  bool signed_max = false;
  float amax_floor = 0.0f;
  float scale_floor = 0.0f;

  int64_t blocks() const { return rows / block_r * (cols / block_c); }
  // Every field fixes the output: equal sources draw bit-identical tensors and scales.
  bool operator==(const BlockQuantSource&) const = default;
  // The block's values in row-major order; its scale.
  float draw(int64_t block, std::vector<float>& v) const {
    const int64_t br = block / (cols / block_c), bc = block % (cols / block_c);
    v.resize(static_cast<size_t>(block_r * block_c));
    float m = signed_max ? -INFINITY : 0.0f;
    for (int64_t r = 0; r < block_r; ++r) {
      const int64_t base = (br * block_r + r) * cols + bc * block_c;
      for (int64_t c = 0; c < block_c; ++c) {
        float x;
        if (base % 2 == 0 && c + 1 < block_c &&
            c % 2 == 0) {  // both halves of a pair land in this row
          normal_pair(seed, stream, static_cast<uint64_t>((base + c) / 2), x,
                      v[static_cast<size_t>(r * block_c + c + 1)]);
        } else if (base % 2 == 0 && c % 2 == 1) {
          x = v[static_cast<size_t>(r * block_c + c)];
        } else {
          x = normal_at(seed, stream, static_cast<uint64_t>(base + c));
        }
        if (bf16) x = num::round_bf16(x);
        if (mul != 1.0f) x = num::round_bf16(x * mul);
        v[static_cast<size_t>(r * block_c + c)] = x;
        m = signed_max ? std::max(m, x) : std::max(m, std::fabs(x));
      }
    }
    return std::max(std::max(m, amax_floor) / kFp8Max, scale_floor);
  }
  // The scales [blocks()], from the cache when fill_quantised of an equal source left them
  // there (one draw per seed instead of two), else drawn again.
  void fill_scales(float* out) const;
  // The fp8 tensor [rows, cols]; leaves its scales in BlockScaleCache for fill_scales.
  void fill_quantised(uint8_t* out) const;
};

// Scales that BlockQuantSource::fill_quantised computed, waiting for fill_scales of the same
// source: an input's scale tensor comes after its fp8 tensor in the signature, and both
// backends draw inputs in signature order, so the multi-GB weights are drawn once per seed.
// A hit is exact because the key is the whole source (which fixes every scale); a miss (other
// order, evicted entry) only costs the second draw. An entry goes when taken, and at most
// kMaxEntries (fp8_blockscale_fused_moe leaves three) and kMaxFloats stay: the oldest is
// dropped first. Process-wide; thread-safe.
class BlockScaleCache {
 public:
  static constexpr size_t kMaxEntries = 4;
  static constexpr size_t kMaxFloats = size_t{64} << 20;  // 256 MiB of scales

  static BlockScaleCache& instance() {
    static BlockScaleCache cache;
    return cache;
  }
  void put(const BlockQuantSource& src, std::vector<float> scales) {
    if (scales.size() > kMaxFloats) return;
    std::lock_guard lock(mu_);
    std::erase_if(entries_, [&](const Entry& e) { return e.first == src; });
    entries_.emplace_back(src, std::move(scales));
    size_t floats = 0;
    for (const Entry& e : entries_) floats += e.second.size();
    while (entries_.size() > kMaxEntries || floats > kMaxFloats) {
      floats -= entries_.front().second.size();
      entries_.pop_front();
    }
  }
  // Copies src's scales to out (blocks() floats) and forgets them; false when not cached.
  bool take(const BlockQuantSource& src, float* out) {
    std::lock_guard lock(mu_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (!(it->first == src)) continue;
      std::copy(it->second.begin(), it->second.end(), out);
      entries_.erase(it);
      return true;
    }
    return false;
  }

 private:
  using Entry = std::pair<BlockQuantSource, std::vector<float>>;
  std::mutex mu_;
  std::deque<Entry> entries_;
};

inline void BlockQuantSource::fill_scales(float* out) const {
  if (BlockScaleCache::instance().take(*this, out)) return;
  parallel_for_cpu(blocks(), [&](int64_t b0, int64_t b1) {
    std::vector<float> v;
    for (int64_t b = b0; b < b1; ++b) out[b] = draw(b, v);
  });
}
inline void BlockQuantSource::fill_quantised(uint8_t* out) const {
  std::vector<float> scales(static_cast<size_t>(blocks()));
  parallel_for_cpu(blocks(), [&](int64_t b0, int64_t b1) {
    std::vector<float> v;
    for (int64_t b = b0; b < b1; ++b) {
      const float s = draw(b, v);
      scales[static_cast<size_t>(b)] = s;
      const int64_t br = b / (cols / block_c), bc = b % (cols / block_c);
      for (int64_t r = 0; r < block_r; ++r) {
        uint8_t* row = out + (br * block_r + r) * cols + bc * block_c;
        for (int64_t c = 0; c < block_c; ++c) {
          const float q =
              std::clamp(v[static_cast<size_t>(r * block_c + c)] / s, -kFp8Max, kFp8Max);
          row[c] = num::float_to_fp8e4m3(q);
        }
      }
    }
  });
  BlockScaleCache::instance().put(*this, std::move(scales));
}

// topk_ids of moe_align_block_size / moe_count_and_sort: torch.randint(0, E) per element.
inline void fill_uniform_ids(int32_t* ids, int64_t n, int64_t experts, uint64_t seed,
                             uint64_t stream) {
  parallel_for_cpu(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const auto id = static_cast<int64_t>(
          std::floor(uniform_at(seed, stream, static_cast<uint64_t>(i)) * experts));
      ids[i] = static_cast<int32_t>(std::min(id, experts - 1));
    }
  });
}

// Per token, the k experts with the largest of `experts` scores (descending; equal scores by
// ascending index), as torch.topk over a row. score(t, e) is the row's value for expert e.
template <class Score, class Emit>
void for_each_topk_row(int64_t tokens, int64_t experts, int64_t k, const Score& score,
                       const Emit& emit) {
  parallel_for_cpu(tokens, [&](int64_t t0, int64_t t1) {
    std::vector<float> v(static_cast<size_t>(experts));
    std::vector<int32_t> order(static_cast<size_t>(experts));
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t e = 0; e < experts; ++e) v[static_cast<size_t>(e)] = score(t, e);
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
        return v[static_cast<size_t>(a)] > v[static_cast<size_t>(b)] ||
               (v[static_cast<size_t>(a)] == v[static_cast<size_t>(b)] && a < b);
      });
      emit(t, v.data(), order.data());
    }
  });
}

// fused_moe routing: router_logits = randn(T, E) fp32, p = softmax(logits), the top-k of p,
// weights renormalised to sum 1 (fp32). `ids` or `weights` may be null.
inline void fill_softmax_routing(int64_t tokens, int64_t experts, int64_t k, uint64_t seed,
                                 uint64_t stream, int32_t* ids, float* weights) {
  auto logit = [&](int64_t t, int64_t e) {
    return normal_at(seed, stream, static_cast<uint64_t>(t * experts + e));
  };
  for_each_topk_row(tokens, experts, k, logit,
                    [&](int64_t t, const float* v, const int32_t* order) {
                      float mx = -INFINITY;
                      for (int64_t e = 0; e < experts; ++e) mx = std::max(mx, v[e]);
                      float z = 0;
                      for (int64_t e = 0; e < experts; ++e) z += std::exp(v[e] - mx);
                      float top_sum = 0;
                      for (int64_t j = 0; j < k; ++j) top_sum += std::exp(v[order[j]] - mx) / z;
                      for (int64_t j = 0; j < k; ++j) {
                        if (ids) ids[t * k + j] = order[j];
                        if (weights)
                          weights[t * k + j] = (std::exp(v[order[j]] - mx) / z) / top_sum;
                      }
                    });
}

}  // namespace atrex::problems::ops
