// The hand-off of the judge's device arena (protocol/arena_handoff.h): what the child accepts as
// an offer, and the answer the judge reads. The device side (CUDA VMM, bwrap) is GpuVmmShare.*
// (label gpu); these run on any host, with a memfd standing in for the device memory's
// descriptor.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "protocol/arena_handoff.h"
#include "protocol/shared_layout.h"

namespace atrex::runner {
namespace {

struct Pair {
  int judge = -1, child = -1;
  Pair() {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    judge = sv[0];
    child = sv[1];
  }
  ~Pair() {
    if (judge >= 0) ::close(judge);
    if (child >= 0) ::close(child);
  }
};

int open_fds() {
  int n = 0;
  for (int fd = 0; fd < 1024; ++fd) n += ::fcntl(fd, F_GETFD) != -1;
  return n;
}

TEST(ArenaHandoff, AnOfferCarriesItsSizeAndTheDescriptorAndTheAnswerComesBack) {
  Pair p;
  const int memfd = ::memfd_create("arena", MFD_CLOEXEC);
  ASSERT_GE(memfd, 0);
  ASSERT_EQ(::ftruncate(memfd, 12345), 0);
  ASSERT_TRUE(send_arena_offer(p.judge, ArenaOffer{2u << 20, memfd}));
  ::close(memfd);
  auto offer = receive_arena_offer(p.child);
  ASSERT_TRUE(offer) << offer.error().message;
  EXPECT_EQ(offer->bytes, 2u << 20);
  ASSERT_GE(offer->fd, 0);
  struct stat st {};
  ASSERT_EQ(::fstat(offer->fd, &st), 0);
  EXPECT_EQ(st.st_size, 12345) << "the descriptor received is not the one offered";
  EXPECT_NE(::fcntl(offer->fd, F_GETFD) & FD_CLOEXEC, 0) << "a candidate's exec would inherit it";
  ::close(offer->fd);
  ASSERT_TRUE(send_arena_answer(p.child, true));
  EXPECT_TRUE(receive_arena_answer(p.judge));
}

TEST(ArenaHandoff, NoArenaIsAnOfferOfNothingAndAClosedSocketIsNoArena) {
  {
    Pair p;
    ASSERT_TRUE(send_arena_offer(p.judge, ArenaOffer{}));
    auto offer = receive_arena_offer(p.child);
    ASSERT_TRUE(offer) << offer.error().message;
    EXPECT_EQ(offer->bytes, 0u);
    EXPECT_EQ(offer->fd, -1);
    ASSERT_TRUE(send_arena_answer(p.child, false));
    EXPECT_FALSE(receive_arena_answer(p.judge)) << "a child that mapped nothing said yes";
  }
  {
    Pair p;
    ::close(p.judge);
    p.judge = -1;
    auto offer = receive_arena_offer(p.child);
    ASSERT_TRUE(offer) << offer.error().message;
    EXPECT_EQ(offer->fd, -1);
  }
  {
    // A child gone without answering: the judge keeps the memfd copies.
    Pair p;
    ::close(p.child);
    p.child = -1;
    EXPECT_FALSE(receive_arena_answer(p.judge));
  }
}

// What is not an offer (a size without a descriptor, a descriptor without a size, two
// descriptors, a payload of another size) is refused, and every descriptor it carried is closed.
TEST(ArenaHandoff, AnythingButOneOfferIsRefusedAndLeaksNoDescriptor) {
  const int before = open_fds();
  auto send_raw = [](int sock, const void* payload, size_t bytes, std::vector<int> fds) {
    iovec io{const_cast<void*>(payload), bytes};
    alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &io;
    msg.msg_iovlen = 1;
    if (!fds.empty()) {
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(fds.size() * sizeof(int));
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
      std::memcpy(CMSG_DATA(c), fds.data(), fds.size() * sizeof(int));
    }
    ASSERT_EQ(::sendmsg(sock, &msg, 0), static_cast<ssize_t>(bytes));
  };
  const uint64_t size = 4u << 20, zero = 0;
  const int a = ::memfd_create("a", MFD_CLOEXEC), b = ::memfd_create("b", MFD_CLOEXEC);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  struct Case {
    const char* what;
    const void* payload;
    size_t bytes;
    std::vector<int> fds;
  };
  const uint32_t short_size = 7;
  for (const Case& c : {Case{"a size without a descriptor", &size, sizeof size, {}},
                        Case{"a descriptor without a size", &zero, sizeof zero, {a}},
                        Case{"two descriptors", &size, sizeof size, {a, b}},
                        Case{"a 4-byte payload", &short_size, sizeof short_size, {a}}}) {
    Pair p;
    send_raw(p.judge, c.payload, c.bytes, c.fds);
    auto offer = receive_arena_offer(p.child);
    EXPECT_FALSE(offer) << c.what << " was taken for an offer";
  }
  ::close(a);
  ::close(b);
  EXPECT_EQ(open_fds(), before) << "a refused offer's descriptors stayed open";
}

// The child's arena layout: every input and every output slot 4 KiB aligned, each output between
// two whole guard regions, nothing overlapping, the total past the last guard.
TEST(ArenaHandoff, TheDeviceArenaLayoutKeepsEveryBufferApartAndGuarded) {
  problems::ResolvedShape shape;
  for (int64_t n : {1, 3000, 4096, 5000}) {
    problems::TensorDesc t;
    t.name = "in" + std::to_string(n);
    t.dtype = problems::DType::kBF16;
    t.dims = {n};
    shape.inputs.push_back(t);
  }
  for (int64_t n : {1, 2049}) {
    problems::TensorDesc t;
    t.name = "out" + std::to_string(n);
    t.dtype = problems::DType::kF32;
    t.dims = {n};
    shape.outputs.push_back(t);
  }
  const DeviceArenaLayout l = device_arena_layout(shape);
  ASSERT_EQ(l.input.size(), 4u);
  ASSERT_EQ(l.output.size(), 2u);
  uint64_t end = 0;
  for (size_t i = 0; i < l.input.size(); ++i) {
    EXPECT_EQ(l.input[i] % 4096, 0u);
    EXPECT_GE(l.input[i], end);
    end = l.input[i] + shape.inputs[i].bytes();
  }
  for (size_t o = 0; o < l.output.size(); ++o) {
    EXPECT_EQ((l.output[o] - kOutputGuardBytes) % 4096, 0u);
    EXPECT_GE(l.output[o] - kOutputGuardBytes, end) << "output " << o << "'s front guard overlaps";
    end = l.output[o] + shape.outputs[o].bytes() + kOutputGuardBytes;
  }
  EXPECT_GE(l.total, end);
}

}  // namespace
}  // namespace atrex::runner
