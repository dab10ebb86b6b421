// atrex-template: split_kv
// atrex-description: split-KV on std::threads, the CPU form of the cuda cluster_split design: each (sequence, kv head) context is cut into up to PARTS parts (multiples of 8 keys, at least MIN_PART_KEYS each); the (sequence, kv head, part) items run on up to THREADS threads, each leaving an unnormalised partial (max, sum, accumulator) of the GQA group over KEY_TILE-key online-softmax steps, then the partials of a group are merged (rescaled by e^(m_r - M)); gathered fp32 key/value rows, vectorisable loops over the head dim
// atrex-param: KEY_TILE = 32 | 8, 32, 128
// atrex-param: PARTS = 4 | 1, 2, 4, 8
// atrex-param: MIN_PART_KEYS = 32 | 8, 32, 128
// atrex-param: THREADS = 2 | 1, 2, 3, 4
#ifndef KEY_TILE
#define KEY_TILE 32
#endif
#ifndef PARTS
#define PARTS 4
#endif
#ifndef MIN_PART_KEYS
#define MIN_PART_KEYS 32
#endif
#ifndef THREADS
#define THREADS 2
#endif

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "atrex/candidate_util.h"

static_assert(KEY_TILE >= 1, "KEY_TILE");
static_assert(PARTS >= 1 && PARTS <= 64, "PARTS");
static_assert(THREADS >= 1 && THREADS <= 4, "THREADS");

namespace {

using atrex::cand::Tensors;
using atrex::cand::fail;
using atrex::cand::is;
using atrex::cand::kBF16;
using atrex::cand::kF16;
using atrex::cand::kI32;
using atrex::cand::bf16_to_float;
using atrex::cand::float_to_bf16;
using atrex::cand::parallel_rows;

float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
float fp16_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0) {
    const float v = static_cast<float>(man) * 5.9604644775390625e-08f;  // man * 2^-24
    return sign ? -v : v;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (man << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
}
// Round to nearest even, like __float2half_rn.
uint16_t float_to_fp16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (a < 0x38800000u) {  // half subnormal: units of 2^-24, exact scaling, then RNE
    const float scaled = bits_float(a) * 16777216.0f;
    uint32_t r = static_cast<uint32_t>(scaled);
    const float frac = scaled - static_cast<float>(r);
    if (frac > 0.5f || (frac == 0.5f && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t h = (a - 0x38000000u) >> 13;  // rebias the exponent 127 -> 15
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

template <bool FP16>
float to_f(uint16_t h) {
  return FP16 ? fp16_to_float(h) : bf16_to_float(h);
}
template <bool FP16>
uint16_t from_f(float f) {
  return FP16 ? float_to_fp16(f) : float_to_bf16(f);
}

// a . b over n floats with 8 independent partial sums: without -ffast-math a single running sum
// is one serial chain the compiler may not reorder; 8 lanes let it use one vector FMA per step.
float dot8(const float* a, const float* b, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int u = 0; u < 8; ++u) acc[u] += a[i + u] * b[i + u];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

struct Problem {
  const uint16_t *q, *k, *v;
  const int32_t *tables, *lens;
  uint16_t* out;
  int64_t seqs, hq, hkv, dim, bs, max_blocks;
};

int64_t keys_of(const Problem& p, int64_t s) {
  int64_t n = p.lens[s] > 0 ? p.lens[s] : 0;
  return n > p.max_blocks * p.bs ? p.max_blocks * p.bs : n;  // stay inside the table row
}

// The partial of keys [begin, end) of (sequence s, kv head kvh), query heads kvh*G .. + G - 1,
// into part = [m[G], l[G], acc[G, d]] (acc not yet divided by l). k_cache
// [blocks, Hkv, d/8, bs, 8]: element i of key j at base + (i/8)*bs*8 + pos*8 + i%8; v_cache
// [blocks, Hkv, d, bs]: element i at base + i*bs + pos; base = (block * Hkv + kvh) * d * bs.
template <bool FP16>
void partial(const Problem& p, int64_t s, int64_t kvh, int64_t begin, int64_t end, float* part,
             std::vector<float>& buf) {
  const int64_t g_n = p.hq / p.hkv, d = p.dim, bs = p.bs;
  float* m = part;
  float* l = m + g_n;
  float* acc = l + g_n;
  for (int64_t g = 0; g < g_n; ++g) m[g] = -INFINITY, l[g] = 0.f;
  for (int64_t i = 0; i < g_n * d; ++i) acc[i] = 0.f;
  buf.resize(static_cast<size_t>(g_n * d + KEY_TILE * d * 2 + g_n * KEY_TILE));
  float* q = buf.data();              // [G, d]
  float* krow = q + g_n * d;          // [KEY_TILE, d]
  float* vrow = krow + KEY_TILE * d;  // [KEY_TILE, d]
  float* sc = vrow + KEY_TILE * d;    // [G, KEY_TILE]
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  const uint16_t* qs = p.q + (s * p.hq + kvh * g_n) * d;
  for (int64_t i = 0; i < g_n * d; ++i) q[i] = to_f<FP16>(qs[i]);
  const int32_t* table = p.tables + s * p.max_blocks;
  for (int64_t j0 = begin; j0 < end; j0 += KEY_TILE) {
    const int64_t nt = end - j0 < KEY_TILE ? end - j0 : KEY_TILE;
    for (int64_t t = 0; t < nt; ++t) {
      const int64_t j = j0 + t, pos = j % bs;
      const int64_t base = (static_cast<int64_t>(table[j / bs]) * p.hkv + kvh) * d * bs;
      for (int64_t c = 0; c < d / 8; ++c)
        for (int e = 0; e < 8; ++e) krow[t * d + c * 8 + e] = to_f<FP16>(p.k[base + (c * bs + pos) * 8 + e]);
      for (int64_t i = 0; i < d; ++i) vrow[t * d + i] = to_f<FP16>(p.v[base + i * bs + pos]);
    }
    for (int64_t g = 0; g < g_n; ++g) {
      float tile_max = -INFINITY;
      for (int64_t t = 0; t < nt; ++t) {
        const float dot = dot8(q + g * d, krow + t * d, d);
        sc[g * KEY_TILE + t] = dot * scale;
        tile_max = std::fmax(tile_max, dot * scale);
      }
      const float m_new = std::fmax(m[g], tile_max);
      const float alpha = std::exp(m[g] - m_new);  // 0 on the first tile (m = -inf)
      float sum = 0.f;
      for (int64_t t = 0; t < nt; ++t) {
        const float e = std::exp(sc[g * KEY_TILE + t] - m_new);
        sc[g * KEY_TILE + t] = e;
        sum += e;
      }
      l[g] = l[g] * alpha + sum;
      m[g] = m_new;
      float* a = acc + g * d;
      for (int64_t i = 0; i < d; ++i) a[i] *= alpha;
      for (int64_t t = 0; t < nt; ++t) {
        const float w = sc[g * KEY_TILE + t];
        const float* vr = vrow + t * d;
        for (int64_t i = 0; i < d; ++i) a[i] += w * vr[i];
      }
    }
  }
}

// Parts per group: each >= MIN_PART_KEYS keys of the longest context, at most PARTS.
int64_t parts_of(const Problem& p) {
  int64_t parts = (p.max_blocks * p.bs + MIN_PART_KEYS - 1) / MIN_PART_KEYS;
  return parts < 1 ? 1 : parts > PARTS ? PARTS : parts;
}

// out of (s, kvh) from its parts: M = max m_r; out = sum acc_r e^(m_r - M) / sum l_r e^(m_r - M).
template <bool FP16>
void merge(const Problem& p, int64_t s, int64_t kvh, int64_t parts, const float* partials) {
  const int64_t g_n = p.hq / p.hkv, d = p.dim, stride = 2 * g_n + g_n * d;
  uint16_t* o = p.out + (s * p.hq + kvh * g_n) * d;
  for (int64_t g = 0; g < g_n; ++g) {
    float mx = -INFINITY;
    for (int64_t r = 0; r < parts; ++r) mx = std::fmax(mx, partials[r * stride + g]);
    for (int64_t i = 0; i < d; ++i) {
      float num = 0.f, den = 0.f;
      if (mx != -INFINITY) {
        for (int64_t r = 0; r < parts; ++r) {
          const float* part = partials + r * stride;
          const float w = std::exp(part[g] - mx);  // 0 for an empty part
          num += part[2 * g_n + g * d + i] * w;
          den += part[g_n + g] * w;
        }
      }
      o[g * d + i] = from_f<FP16>(mx != -INFINITY ? num / den : 0.f);
    }
  }
}

template <bool FP16>
void run(const Problem& p) {
  const int64_t g_n = p.hq / p.hkv, parts = parts_of(p), stride = 2 * g_n + g_n * p.dim;
  const int64_t groups = p.seqs * p.hkv;
  std::vector<float> partials(static_cast<size_t>(groups * parts * stride));
  float* pp = partials.data();
  // Item (group, r): part r of the group's keys, chunks of a multiple of 8 keys as on the GPU.
  parallel_rows(groups * parts, p.dim * g_n * 8, THREADS, 64 * 1024, [&](int64_t b, int64_t e) {
    std::vector<float> buf;
    for (int64_t item = b; item < e; ++item) {
      const int64_t grp = item / parts, r = item % parts, s = grp / p.hkv, kvh = grp % p.hkv;
      const int64_t n = keys_of(p, s), chunk = ((n + parts - 1) / parts + 7) / 8 * 8;
      const int64_t begin = r * chunk < n ? r * chunk : n;
      const int64_t end = begin + chunk < n ? begin + chunk : n;
      partial<FP16>(p, s, kvh, begin, end, pp + item * stride, buf);
    }
  });
  for (int64_t grp = 0; grp < groups; ++grp)
    merge<FP16>(p, grp / p.hkv, grp % p.hkv, parts, pp + grp * parts * stride);
}

}  // namespace

ATREX_CANDIDATE_ERROR_MESSAGE_EXPORT

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* query = atrex_input(launch, "query");
  const bool fp16 = is(query, kF16);
  const auto dt = fp16 ? kF16 : kBF16;
  Tensors ts(launch, "paged_attention_decode");
  query = ts.input("query", dt, 3);                     // [B, Hq, d]
  const DLTensor* kc = ts.input("k_cache", dt, 5);      // [blocks, Hkv, d/8, bs, 8]
  const DLTensor* vc = ts.input("v_cache", dt, 4);      // [blocks, Hkv, d, bs]
  const DLTensor* tables = ts.input("block_tables", kI32, 2);  // [B, max_blocks]
  const DLTensor* lens = ts.input("seq_lens", kI32, 1);        // [B]
  const DLTensor* out = ts.output("out", dt, 3);               // [B, Hq, d]
  if (!ts.ok() || !ts.same_dims(query, out) || !ts.dim_is(kc, 4, 8) ||
      !ts.dim_is(kc, 2, query->shape[2] / 8) || !ts.dim_is(vc, 2, query->shape[2]) ||
      !ts.dim_is(tables, 0, query->shape[0]) || !ts.dim_is(lens, 0, query->shape[0]))
    return ts.failed();
  Problem p{static_cast<const uint16_t*>(query->data), static_cast<const uint16_t*>(kc->data),
            static_cast<const uint16_t*>(vc->data),    static_cast<const int32_t*>(tables->data),
            static_cast<const int32_t*>(lens->data),   static_cast<uint16_t*>(out->data),
            query->shape[0], query->shape[1], vc->shape[1], query->shape[2], vc->shape[3],
            tables->shape[1]};
  if (p.hkv < 1 || p.hq % p.hkv != 0 || p.dim % 8 != 0)
    return fail("paged_attention_decode: %lld query heads over %lld kv heads, head dim %lld",
                static_cast<long long>(p.hq), static_cast<long long>(p.hkv),
                static_cast<long long>(p.dim));
  if (fp16)
    run<true>(p);
  else
    run<false>(p);
  return 0;
}
