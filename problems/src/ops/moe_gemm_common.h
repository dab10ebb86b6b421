// Shared pieces of the moe_gemm references: temporary buffers per executor, exact fp8 e4m3
// decoding, silu, and the expert-major routing that the fused-MoE references group their work by.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "atrex/problems/numeric.h"
#include "executors.h"

namespace atrex::problems::ops {

// Temporary buffers of a reference (routing tables, intermediate activations): host memory for
// CpuExec. moe_gemm_cuda.cu specialises it for CudaExec with stream-ordered cudaMallocAsync /
// cudaFreeAsync, so a buffer lives exactly as long as the kernels that use it.
template <class Exec>
struct Scratch;

template <>
struct Scratch<CpuExec> {
  static void* alloc(const CpuExec&, size_t bytes) { return std::malloc(bytes); }
  static void release(const CpuExec&, void* p) { std::free(p); }
};

// Owns one Scratch allocation. A failed allocation leaves it empty: the reference then skips its
// work (the CUDA error stays pending and is reported by the caller).
template <class Exec>
class ScratchBuffer {
 public:
  ScratchBuffer(const Exec& ex, size_t bytes)
      : ex_(ex), p_(Scratch<Exec>::alloc(ex, bytes > 0 ? bytes : 1)) {}
  ~ScratchBuffer() {
    if (p_) Scratch<Exec>::release(ex_, p_);
  }
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  const Exec& ex_;
  void* p_;
};

// An fp8 e4m3fn byte as an integer count of 2^-9 (every finite e4m3fn value is one: 448 =
// 229376 * 2^-9), so fp8 x fp8 dot products accumulate exactly in int64. NaN (0x7f/0xff) is not
// modelled: the generators never produce it (they clamp to ±448 before the cast).
ATREX_HD int32_t fp8_units(uint8_t v) {
  const int32_t e = (v >> 3) & 15;
  const int32_t m = v & 7;
  const int32_t mag = e ? ((8 | m) << (e - 1)) : m;
  return (v & 0x80) ? -mag : mag;
}
ATREX_HD float fp8_value(uint8_t v) { return static_cast<float>(fp8_units(v)) * 0.001953125f; }

// Four consecutive bytes (p is 4-byte aligned on the device: rows are multiples of 128 bytes).
ATREX_HD uint32_t load_u32(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint32_t*>(p);
#else
  uint32_t u;
  memcpy(&u, p, sizeof u);
  return u;
#endif
}

// torch's F.silu on fp32: x / (1 + exp(-x)) in float.
ATREX_HD float silu_f32(float x) { return x / (1.0f + expf(-x)); }

// Expert-major routing of the (token, k) pairs, the order in which vLLM's fused MoE walks them:
// slots [offset[e], offset[e+1]) hold the flat pair indices t*k + j routed to expert e, ascending.
// pair_at[slot] = flat pair index; slot_of[pair] = its slot. Built in three passes.
struct RouteCount {  // per expert: offset[e + 1] = number of pairs routed to e
  const int32_t* ids;
  int64_t pairs;
  int64_t* offset;
  ATREX_HD void operator()(int64_t e) const {
    int64_t c = 0;
    for (int64_t i = 0; i < pairs; ++i) c += ids[i] == e;
    offset[e + 1] = c;
  }
};
struct RoutePrefix {  // one thread: inclusive prefix over experts
  int64_t experts;
  int64_t* offset;
  ATREX_HD void operator()(int64_t) const {
    offset[0] = 0;
    for (int64_t e = 0; e < experts; ++e) offset[e + 1] += offset[e];
  }
};
struct RouteFill {  // per expert: its pairs in ascending order
  const int32_t* ids;
  int64_t pairs;
  const int64_t* offset;
  int64_t* pair_at;
  int64_t* slot_of;
  ATREX_HD void operator()(int64_t e) const {
    int64_t s = offset[e];
    for (int64_t i = 0; i < pairs; ++i) {
      if (ids[i] != e) continue;
      pair_at[s] = i;
      slot_of[i] = s;
      ++s;
    }
  }
};

// Routing tables in one scratch buffer: offset [E + 1], pair_at [pairs], slot_of [pairs].
template <class Exec>
struct Routing {
  ScratchBuffer<Exec> buf;
  int64_t* offset;
  int64_t* pair_at;
  int64_t* slot_of;
  Routing(const Exec& ex, const int32_t* ids, int64_t pairs, int64_t experts)
      : buf(ex, static_cast<size_t>(experts + 1 + 2 * pairs) * sizeof(int64_t)) {
    offset = buf.template as<int64_t>();
    pair_at = offset + experts + 1;
    slot_of = pair_at + pairs;
    if (!buf) return;
    ex.for_each(experts, RouteCount{ids, pairs, offset});
    ex.for_each(1, RoutePrefix{experts, offset});
    ex.for_each(experts, RouteFill{ids, pairs, offset, pair_at, slot_of});
  }
};

// Index i of a slot-major GEMM sweep -> (slot, column): 32 consecutive i are 32 consecutive slots
// of one column, so a warp shares one weight row (mostly one expert) and the 32 activation rows
// of a slot tile stay cached while every column of the tile is computed.
struct SlotTile {
  int64_t slots;
  int64_t cols;
  ATREX_HD int64_t total() const { return (slots + 31) / 32 * 32 * cols; }
  ATREX_HD bool map(int64_t i, int64_t& slot, int64_t& col) const {
    const int64_t tile = i / (32 * cols);
    const int64_t r = i % (32 * cols);
    col = r / 32;
    slot = tile * 32 + r % 32;
    return slot < slots;
  }
};

}  // namespace atrex::problems::ops
