#include "protocol/arena_handoff.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace atrex::runner {
namespace {

// The control buffer of one descriptor and the message that points at it and at the payload.
struct FdMessage {
  iovec io{};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  FdMessage(void* payload, size_t bytes) {
    io.iov_base = payload;
    io.iov_len = bytes;
    msg.msg_iov = &io;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  FdMessage(const FdMessage&) = delete;
  FdMessage& operator=(const FdMessage&) = delete;
};

}  // namespace

Status send_arena_offer(int socket, const ArenaOffer& offer) {
  uint64_t bytes = offer.fd >= 0 ? offer.bytes : 0;
  FdMessage m(&bytes, sizeof bytes);
  if (bytes > 0) {
    cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &offer.fd, sizeof offer.fd);
  } else {
    m.msg.msg_control = nullptr;
    m.msg.msg_controllen = 0;
  }
  for (;;) {
    const ssize_t n = ::sendmsg(socket, &m.msg, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof bytes))
      return io_error(fmt::format("offering the device arena: sendmsg: {}",
                                  n < 0 ? std::strerror(errno) : "short write"));
    return ok();
  }
}

Result<ArenaOffer> receive_arena_offer(int socket) {
  uint64_t bytes = 0;
  FdMessage m(&bytes, sizeof bytes);
  ssize_t n = -1;
  do {
    n = ::recvmsg(socket, &m.msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return io_error(fmt::format("the device arena's offer: recvmsg: {}", std::strerror(errno)));
  int fd = -1, extra = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m.msg); c; c = CMSG_NXTHDR(&m.msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t k = 0; k < count; ++k) {
      int got = -1;
      std::memcpy(&got, CMSG_DATA(c) + k * sizeof(int), sizeof got);
      if (fd < 0) {
        fd = got;
      } else {
        ::close(got);
        ++extra;
      }
    }
  }
  if (n == 0 && fd < 0) return ArenaOffer{};  // the judge is gone, or offered nothing
  const bool truncated = (m.msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
  if (n != static_cast<ssize_t>(sizeof bytes) || truncated || extra > 0 || (bytes > 0) != (fd >= 0)) {
    if (fd >= 0) ::close(fd);
    return io_error(fmt::format("the device arena's offer is not one: {} bytes, {} descriptors{}",
                                n, (fd >= 0) + extra, truncated ? ", truncated" : ""));
  }
  return ArenaOffer{bytes, fd};
}

Status send_arena_answer(int socket, bool mapped) {
  const char b = mapped ? 'y' : 'n';
  for (;;) {
    const ssize_t n = ::send(socket, &b, 1, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n != 1)
      return io_error(fmt::format("answering the device arena's offer: {}", std::strerror(errno)));
    return ok();
  }
}

bool receive_arena_answer(int socket) {
  char b[2] = {};
  ssize_t n = -1;
  do {
    n = ::recv(socket, b, sizeof b, 0);
  } while (n < 0 && errno == EINTR);
  return n == 1 && b[0] == 'y';
}

}  // namespace atrex::runner
