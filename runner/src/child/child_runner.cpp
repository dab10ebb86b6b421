// The evaluation child's entry (child_runner.h). The work of one shape is ShapeRun's (shape_run.h).
#include "child_runner.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "atrex/common/process/seccomp.h"
#include "judge.h"
#include "protocol/arena_handoff.h"
#include "shape_run.h"

namespace atrex::runner {

ChildShapeResponse run_child_shape(const ChildTaskRequest& task, const ChildShape& item,
                                   ChildDevice& device, child::CandidateLoader& loader,
                                   child::JudgeLink& judge) {
  child::ShapeRun run(task, item, device, loader, judge);
  return run.run();
}

namespace {

std::atomic<bool> g_stop_requested{false};
extern "C" void on_stop_signal(int) { g_stop_requested.store(true); }

}  // namespace

ChildArgs child_args(int argc, char** argv) {
  ChildArgs a;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--request") == 0) a.request = argv[i + 1];
    if (std::strcmp(argv[i], "--response") == 0) a.response = argv[i + 1];
    if (std::strcmp(argv[i], "--request-fd") == 0) a.request_fd = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--response-fd") == 0) a.response_fd = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--stop-fd") == 0) a.stop_fd = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--judge-out-fd") == 0) a.judge_out_fd = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--judge-in-fd") == 0) a.judge_in_fd = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--shared-fd") == 0) a.shared_fd = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--arena-fd") == 0) a.arena_fd = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--check-in-fd") == 0) a.check_in_fd = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--check-out-fd") == 0) a.check_out_fd = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--ping-fd") == 0) a.ping_fd = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--pong-fd") == 0) a.pong_fd = std::atoi(argv[i + 1]);
  }
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--judge") == 0) a.judge = true;
  }
  return a;
}

Result<ChildRequest> read_child_request(const ChildArgs& args) {
  if (args.request_fd < 0) {
    ATREX_ASSIGN_OR_RETURN(Json json, read_json_file(args.request));
    return child_request_from_json(json, args.request);
  }
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(args.request_fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error(fmt::format("reading the request: {}", std::strerror(errno)));
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  // Gone before any candidate code runs: the nonce stays only in this process's memory.
  ::close(args.request_fd);
  try {
    return child_request_from_json(Json::parse(text), "request fd");
  } catch (const Json::exception& e) {
    return make_error(ErrorCode::kInvalidInput, fmt::format("request fd: {}", e.what()));
  }
}

Status write_response_line(int fd, const std::string& line) {
  for (size_t done = 0; done < line.size();) {
    const ssize_t n = ::write(fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return io_error(fmt::format("writing the response: {}", std::strerror(errno)));
    done += static_cast<size_t>(n);
  }
  return ok();
}

namespace {

bool stop_fd_readable(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP)) != 0;
}

}  // namespace

int run_child_task(const ChildTaskRequest& task, ChildDevice& device,
                   child::CandidateLoader& loader, child::JudgeLink& judge, int response_fd,
                   int stop_fd) {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  ::sigaction(SIGUSR1, &sa, nullptr);
  // A judge that is gone is an error on the next write (a crashed verdict), not SIGPIPE.
  ::signal(SIGPIPE, SIG_IGN);
  // The device is set up (context, runtime threads); from here on the candidate may run.
  if (task.seccomp) {
    // A Python candidate on a GPU keeps process creation: Triton's JIT runs ptxas and the C
    // compiler (docs/python-candidates.md "Sandbox").
    std::error_code ec;
    const bool jit = std::filesystem::is_directory(task.library, ec) &&
                     device.dl_device().device_type != kDLCPU;
    if (auto s = install_candidate_seccomp(jit); !s) {
      fmt::print(stderr, "the evaluation child refuses to run the candidate: {}\n",
                 s.error().message);
      return 5;
    }
  }
  for (const ChildShape& item : task.shapes) {
    if (g_stop_requested.load() || stop_fd_readable(stop_fd)) break;
    const auto t0 = std::chrono::steady_clock::now();
    ChildShapeResponse response = run_child_shape(task, item, device, loader, judge);
    // steady_clock is CLOCK_MONOTONIC, shared with the runner: it charges the child's start to
    // the first shape.
    response.started_at_s = std::chrono::duration<double>(t0.time_since_epoch()).count();
    response.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    response.nonce = task.nonce;
    if (auto told = judge.shape_end(item.shape_id, response.status); !told &&
        response.status != EvalStatus::kCrashed) {
      response.status = EvalStatus::kCrashed;
      response.error = "judge: " + told.error().message;
    }
    if (auto w = write_response_line(response_fd, to_json(response).dump() + "\n"); !w) {
      fmt::print(stderr, "{}\n", w.error().message);
      return 1;
    }
    if (response.status == EvalStatus::kCrashed) {
      std::_Exit(
          3);  // a crashed (sticky-error) context must not be reused, nor its destructors run
    }
    // An unseen-shape check that failed decides the task (the evaluator's unseen_check.h): the
    // shapes after it are not evaluated.
    if (item.stop_task_on_failure && response.status == EvalStatus::kWrongResult) break;
  }
  return 0;
}

namespace {

// The judge's device arena (protocol/arena_handoff.h), mapped before any candidate code runs
// (and before the filter), and the answer the judge waits for; the socket is closed after it.
// Anything short of a mapping leaves the memfd copies (the judge drops the arena on 'n').
void map_device_arena(ChildDevice& device, child::JudgeLink& judge, int socket) {
  bool mapped = false;
  auto offer = receive_arena_offer(socket);
  if (!offer || offer->fd < 0) {
    // No arena (cpu, hip, a judge that could not allocate it): the judge waits for no answer.
    if (!offer) fmt::print(stderr, "{}\n", offer.error().message);
    ::close(socket);
    return;
  }
  if (auto p = device.import_shared(offer->fd, offer->bytes)) {
    judge.set_device_arena(*p, offer->bytes);
    mapped = true;
  } else {
    fmt::print(stderr, "the judge's device arena is not mapped, the checks copy through the "
                       "host: {}\n",
               p.error().message);
    (void)device.synchronize();
  }
  ::close(offer->fd);
  if (auto told = send_arena_answer(socket, mapped); !told) {
    fmt::print(stderr, "{}\n", told.error().message);
    judge.set_device_arena(nullptr, 0);
  }
  ::close(socket);
}

}  // namespace

int child_main(int argc, char** argv, ChildDevice& device) {
  const ChildArgs args = child_args(argc, argv);
  if (args.judge) {
    if (args.request_fd < 0 || args.response_fd < 0 || args.check_in_fd < 0 ||
        args.check_out_fd < 0 || args.shared_fd < 0) {
      fmt::print(stderr,
                 "usage: {} --judge --request-fd N --response-fd M --check-in-fd A "
                 "--check-out-fd B --shared-fd C [--ping-fd P --pong-fd Q] [--device N]\n",
                 argv[0]);
      return 2;
    }
    auto request = read_child_request(args);
    if (!request || !request->task) {
      fmt::print(stderr, "{}\n", request ? "the judge takes a task request" : request.error().message);
      return 2;
    }
    return run_judge_task(*request->task, device, args.response_fd, args.check_in_fd,
                          args.check_out_fd, args.shared_fd, args.ping_fd, args.pong_fd,
                          args.arena_fd);
  }
  const bool task_mode = args.request_fd >= 0 && args.response_fd >= 0;
  if (!task_mode && (args.request.empty() || args.response.empty())) {
    fmt::print(stderr,
               "usage: {0} --request-fd N --response-fd M --stop-fd S --judge-out-fd A "
               "--judge-in-fd B --shared-fd C [--device N] (task)\n"
               "       {0} --request FILE --response FILE [--device N] (dump)\n",
               argv[0]);
    return 2;
  }
  auto request = read_child_request(args);
  if (!request) {
    fmt::print(stderr, "{}\n", request.error().message);
    return 2;
  }
  if (request->task) {
    if (!task_mode) {
      fmt::print(stderr, "a task's results go to --response-fd, never to a file\n");
      return 2;
    }
    auto loader = child::make_candidate_loader();
    child::JudgeLink judge(args.judge_out_fd, args.judge_in_fd, args.shared_fd);
    if (args.arena_fd >= 0) map_device_arena(device, judge, args.arena_fd);
    return run_child_task(*request->task, device, *loader, judge, args.response_fd, args.stop_fd);
  }
  ATREX_ASSERT(request->dump.has_value(), "a request is a task or a dump");
  const ChildDumpResponse response = run_child_dump(*request->dump, device);
  if (auto written = write_text_file_atomic(args.response, to_json(response).dump()); !written) {
    fmt::print(stderr, "{}\n", written.error().message);
    return 1;
  }
  // A crashed (sticky-error) context must not be reused: exit without running destructors
  // that would touch it again.
  if (response.crashed) std::_Exit(3);
  return 0;
}

}  // namespace atrex::runner
