// One file descriptor over a Unix socket (SCM_RIGHTS, unix(7)), for the device-memory hand-off of
// GpuVmmShare and atrex-vmm-share-probe. One byte of payload carries it.
#pragma once

#include <sys/socket.h>

#include <cstring>

namespace atrex::testing {

// The control buffer of one descriptor, and the message that points at it and at `byte`.
struct FdMessage {
  char byte = 'f';
  iovec io{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  FdMessage() {
    msg.msg_iov = &io;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  FdMessage(const FdMessage&) = delete;
  FdMessage& operator=(const FdMessage&) = delete;
};

inline bool send_fd(int socket, int fd) {
  FdMessage m;
  cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  return ::sendmsg(socket, &m.msg, 0) == 1;
}

// The descriptor received, or -1 (errno from recvmsg, or none was attached).
inline int receive_fd(int socket) {
  FdMessage m;
  if (::recvmsg(socket, &m.msg, 0) != 1) return -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m.msg); c; c = CMSG_NXTHDR(&m.msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
      return fd;
    }
  }
  return -1;
}

}  // namespace atrex::testing
