// The layout of the memfd the evaluation child shares with its judge, for one shape (judge.h,
// child/judge_link.h; docs/evaluation.md "The judge"), computed alike by the runner (which sizes
// the memfd for the task's largest shape), the child and the judge:
//   [0, published)            what the child publishes for a check: the shape's inputs, then its
//                             outputs, one after the other (JudgeLink::publish);
//   [arena, total)            from the next 4 KiB boundary, the output arena: where the cpu child
//                             keeps the outputs the candidate writes, each between two guard
//                             regions of kOutputGuardBytes (slots 4 KiB aligned), so that the judge
//                             reads them itself, in its own process, the moment a timed call's
//                             done reaches it (where the brackets hold the work: cpu).
// The memfd's pages are allocated only when touched, so backends that keep their outputs on a
// device (cuda, hip) pay nothing for the arena.
// The judge's device arena (protocol/arena_handoff.h), where the backend shares device memory
// (cuda), has a layout of its own (device_arena_layout): the candidate's work inputs, then its
// outputs between their guard regions, so that the judge compares them where they are.
#pragma once

#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "atrex/common/error.h"
#include "atrex/problems/operator.h"

namespace atrex::runner {

// The guard regions before and after every output (docs/evaluation.md "Guard regions").
inline constexpr uint64_t kOutputGuardBytes = 4096;

// 4 KiB slots: `n` rounded up to the next page.
inline uint64_t page_up(uint64_t n) {
  constexpr uint64_t kPage = 4096;
  return (n + kPage - 1) / kPage * kPage;
}

// Places `shape`'s outputs from byte `at` (page aligned), each between two guard regions in a
// slot of its own: appends each output's first byte to `offsets` and returns the end.
inline uint64_t place_guarded_outputs(const problems::ResolvedShape& shape, uint64_t at,
                                      std::vector<uint64_t>& offsets) {
  for (const auto& t : shape.outputs) {
    offsets.push_back(at + kOutputGuardBytes);
    at = page_up(at + kOutputGuardBytes + t.bytes() + kOutputGuardBytes);
  }
  return at;
}

struct SharedLayout {
  uint64_t published = 0;        // bytes of the published area, from offset 0
  uint64_t arena = 0;            // offset of the output arena (4 KiB aligned)
  std::vector<uint64_t> output;  // offset of each output's first byte (after its front guard)
  uint64_t total = 0;            // bytes the memfd needs for this shape
};

inline SharedLayout shared_layout(const problems::ResolvedShape& shape) {
  SharedLayout l;
  for (const auto& t : shape.inputs) l.published += t.bytes();
  for (const auto& t : shape.outputs) l.published += t.bytes();
  l.arena = page_up(l.published);
  l.total = place_guarded_outputs(shape, l.arena, l.output);
  return l;
}

// The judge's device arena for one shape: where the child keeps the candidate's work inputs and
// its outputs (each after a front guard of kOutputGuardBytes and before a back one), every slot
// 4 KiB aligned, and the bytes the shape needs. The judge allocates the largest total of a task's
// shapes (rounded up to the device's granularity).
struct DeviceArenaLayout {
  std::vector<uint64_t> input;   // offset of each input
  std::vector<uint64_t> output;  // offset of each output's first byte (after its front guard)
  uint64_t total = 0;
};

inline DeviceArenaLayout device_arena_layout(const problems::ResolvedShape& shape) {
  DeviceArenaLayout l;
  uint64_t at = 0;
  for (const auto& t : shape.inputs) {
    l.input.push_back(at);
    at = page_up(at + std::max<uint64_t>(t.bytes(), 16));
  }
  l.total = place_guarded_outputs(shape, at, l.output);
  return l;
}

// The whole memfd `fd` (its size now) mapped shared, read-write for the child, read-only for
// the judge; {nullptr, 0} for an empty one. kIo naming the failing call.
struct MemfdMapping {
  uint8_t* data = nullptr;
  size_t bytes = 0;
};
inline Result<MemfdMapping> map_shared_memfd(int fd, bool writable) {
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return io_error(fmt::format("the shared memfd: {}", std::strerror(errno)));
  MemfdMapping m{nullptr, static_cast<size_t>(st.st_size)};
  if (m.bytes == 0) return m;
  void* p = ::mmap(nullptr, m.bytes, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED,
                   fd, 0);
  if (p == MAP_FAILED)
    return io_error(fmt::format("mapping the shared memfd: {}", std::strerror(errno)));
  m.data = static_cast<uint8_t*>(p);
  return m;
}

}  // namespace atrex::runner
