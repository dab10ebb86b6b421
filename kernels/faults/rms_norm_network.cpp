// ATTACKS the network (issue 14 item 2): connects to a TCP listener on the host's loopback (the
// test starts one and writes its port over ATREX_ATTACK_PORT; in a sweep it would be the
// queue's Redis) and sends FLUSHALL, and looks for the listener in /proc/net/tcp. Reports what
// worked and fails the shape. Expected in the sandbox: socket or connect fails, the listener sees
// nothing, /proc/net/tcp of its own network namespace does not list it.
// Twin: rms_norm_sandbox_honest.cpp (an AF_UNIX socketpair still works).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "atrex/candidate.h"

static float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

static uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// The honest computation, row by row.
static int rms_norm(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !out || x->ndim != 2) return 1;
  const int64_t rows = x->shape[0], hidden = x->shape[1];
  const float eps = static_cast<float>(atrex_param_float(launch, "eps", 1e-6));
  const auto* xs = static_cast<const uint16_t*>(x->data);
  const auto* ws = static_cast<const uint16_t*>(w->data);
  auto* os = static_cast<uint16_t*>(out->data);
  for (int64_t r = 0; r < rows; ++r) {
    float ss = 0;
    for (int64_t h = 0; h < hidden; ++h) {
      const float v = bf16_to_float(xs[r * hidden + h]);
      ss += v * v;
    }
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(hidden) + eps);
    for (int64_t h = 0; h < hidden; ++h) {
      os[r * hidden + h] =
          float_to_bf16(bf16_to_float(xs[r * hidden + h]) * inv * bf16_to_float(ws[h]));
    }
  }
  return 0;
}

// What the attack could do, for the test to read from the record's error.
static std::string g_report;
ATREX_CANDIDATE_EXPORT const char* atrex_candidate_error_message() { return g_report.c_str(); }

static std::string outcome(long rc) {
  if (rc >= 0) return "ok";
  const char* name = strerrorname_np(errno);
  return name ? name : "error";
}

#define ATREX_ATTACK_PORT 0

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  g_report = "socket=" + outcome(s);
  if (s >= 0) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(ATREX_ATTACK_PORT);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int c = ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
    g_report += " connect=" + outcome(c);
    if (c == 0) {
      const char cmd[] = "FLUSHALL\r\n";
      g_report += " sent=" + std::to_string(::send(s, cmd, sizeof cmd - 1, 0));
    }
    ::close(s);
  }
  char port_hex[16];
  std::snprintf(port_hex, sizeof port_hex, ":%04X ", ATREX_ATTACK_PORT);
  std::ifstream tcp("/proc/net/tcp");
  std::string line;
  bool seen = false;
  while (std::getline(tcp, line)) seen = seen || line.find(port_hex) != std::string::npos;
  g_report += std::string(" listener_in_proc_net_tcp=") + (seen ? "yes" : "no");
  (void)rms_norm(launch);
  return 1;
}
