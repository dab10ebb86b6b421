// The judge process on its own (atrex-eval-cpu --judge, judge.h), driven by a test as an
// evaluation child would drive it: the request on a memfd, the check pipes, the shared memfd
// (64 MiB) and the verdict pipe. Tests only (GoogleTest assertions inside).
#pragma once

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "atrex/common/json_io.h"
#include "atrex/problems/host_run.h"
#include "atrex/common/wire/child_protocol.h"
#include "atrex/common/wire/judge_messages.h"
#include "protocol/shared_layout.h"

namespace atrex::runner {

class JudgeProcess {
 public:
  explicit JudgeProcess(const ChildTaskRequest& task) {
    const std::string req = to_json(ChildRequest{task, {}}).dump();
    const int req_fd = ::memfd_create("req", 0);
    EXPECT_EQ(::write(req_fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
    ::lseek(req_fd, 0, SEEK_SET);
    shared_ = ::memfd_create("shared", 0);
    EXPECT_EQ(::ftruncate(shared_, 64 << 20), 0);
    int verdict[2], in[2], out[2];
    EXPECT_EQ(::pipe(verdict), 0);
    EXPECT_EQ(::pipe(in), 0);
    EXPECT_EQ(::pipe(out), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fds[] = {req_fd, verdict[1], in[0], out[1], shared_};
      int moved[5];
      for (int k = 0; k < 5; ++k) moved[k] = ::dup(fds[k]);  // above every target fd
      for (int k = 0; k < 5; ++k) ::dup2(moved[k], 3 + k);
      for (int fd = 8; fd < 4096; ++fd) ::close(fd);  // no other end of a pipe stays open here
      const std::string exe = std::string(ATREX_TEST_BIN_DIR) + "/atrex-eval-cpu";
      ::execl(exe.c_str(), exe.c_str(), "--judge", "--request-fd", "3", "--response-fd", "4",
              "--check-in-fd", "5", "--check-out-fd", "6", "--shared-fd", "7", nullptr);
      ::_exit(127);
    }
    ::close(req_fd);
    ::close(verdict[1]);
    ::close(in[0]);
    ::close(out[1]);
    verdict_ = verdict[0];
    to_ = in[1];
    from_ = out[0];
  }
  ~JudgeProcess() {
    ::close(to_);
    ::close(from_);
    ::close(verdict_);
    ::close(shared_);
    int st = 0;
    ::waitpid(pid_, &st, 0);
  }
  void send(const Json& j) {
    const std::string line = j.dump() + "\n";
    ASSERT_EQ(::write(to_, line.data(), line.size()), static_cast<ssize_t>(line.size()));
  }
  Json reply() { return Json::parse(read_line(from_)); }
  // The inputs (when `inputs`: a shape's first check and the first after timing), then the
  // outputs, from offset 0 (judge_link.h).
  void publish(const problems::HostRun& run, bool inputs = true) {
    off_t at = 0;
    for (const auto* list : {&run.inputs, &run.outputs}) {
      if (list == &run.inputs && !inputs) continue;
      for (const auto& b : *list) {
        ASSERT_EQ(::pwrite(shared_, b.data(), b.size(), at), static_cast<ssize_t>(b.size()));
        at += static_cast<off_t>(b.size());
      }
    }
  }
  // The judge's answer to a check of `run` sent without the inputs: when it asks for them
  // ({"inputs":true}), they are published after the outputs (`inputs`, default run's own) and
  // {"op":"inputs"} sent; `asked` says whether it did.
  Json check_answer(const problems::HostRun& run, bool* asked = nullptr,
                    const std::vector<std::vector<uint8_t>>* inputs = nullptr) {
    Json r = reply();
    if (asked) *asked = r == judge_inputs_request();
    if (r != judge_inputs_request()) return r;
    off_t at = 0;
    for (const auto& b : run.outputs) at += static_cast<off_t>(b.size());
    for (const auto& b : inputs ? *inputs : run.inputs) {
      EXPECT_EQ(::pwrite(shared_, b.data(), b.size(), at), static_cast<ssize_t>(b.size()));
      at += static_cast<off_t>(b.size());
    }
    send(judge_inputs_published());
    return reply();
  }
  // `outputs` into the output arena (protocol/shared_layout.h), where a cpu child's candidate
  // writes them and the judge reads them at a timed call's done.
  void write_arena(const problems::ResolvedShape& shape,
                   const std::vector<std::vector<uint8_t>>& outputs) {
    const SharedLayout layout = shared_layout(shape);
    for (size_t i = 0; i < outputs.size(); ++i) {
      ASSERT_EQ(::pwrite(shared_, outputs[i].data(), outputs[i].size(),
                         static_cast<off_t>(layout.output[i])),
                static_cast<ssize_t>(outputs[i].size()));
    }
  }
  JudgeVerdict verdict() {
    auto v = judge_verdict_from_json(Json::parse(read_line(verdict_)), "verdict");
    EXPECT_TRUE(v) << v.error().message;
    return v ? *v : JudgeVerdict{};
  }

 private:
  static std::string read_line(int fd) {
    std::string line;
    char c = 0;
    while (::read(fd, &c, 1) == 1 && c != '\n') line += c;
    return line;
  }
  pid_t pid_ = -1;
  int verdict_ = -1, to_ = -1, from_ = -1, shared_ = -1;
};

}  // namespace atrex::runner
