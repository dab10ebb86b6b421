// The evaluation child's entry (child_runner.h). The work of one shape is ShapeRun's (shape_run.h).
#include "child_runner.h"

#include <signal.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "shape_run.h"

namespace atrex::runner {

ChildShapeResponse run_child_shape(const ChildTaskRequest& task, const ChildShape& item,
                                   ChildDevice& device, child::CandidateLoader& loader) {
  child::ShapeRun run(task, item, device, loader);
  return run.run();
}

namespace {

std::atomic<bool> g_stop_requested{false};
extern "C" void on_stop_signal(int) { g_stop_requested.store(true); }

// Command-line arguments of the children: --request FILE --response FILE (--device N is read by
// the device setup).
struct ChildArgs {
  std::string request, response;
};
ChildArgs child_args(int argc, char** argv) {
  ChildArgs a;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--request") == 0) a.request = argv[i + 1];
    if (std::strcmp(argv[i], "--response") == 0) a.response = argv[i + 1];
  }
  return a;
}

}  // namespace

int run_child_task(const ChildTaskRequest& task, ChildDevice& device,
                   child::CandidateLoader& loader, const std::string& response_path) {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  ::sigaction(SIGUSR1, &sa, nullptr);
  std::FILE* out = std::fopen(response_path.c_str(), "a");
  if (!out) {
    fmt::print(stderr, "{}: cannot open the response file: {}\n", response_path,
               std::strerror(errno));
    return 1;
  }
  for (const ChildShape& item : task.shapes) {
    if (g_stop_requested.load()) break;
    const auto t0 = std::chrono::steady_clock::now();
    ChildShapeResponse response = run_child_shape(task, item, device, loader);
    // steady_clock is CLOCK_MONOTONIC, shared with the runner: it charges the child's start to
    // the first shape.
    response.started_at_s = std::chrono::duration<double>(t0.time_since_epoch()).count();
    response.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string line = to_json(response).dump() + "\n";
    if (std::fwrite(line.data(), 1, line.size(), out) != line.size() || std::fflush(out) != 0) {
      fmt::print(stderr, "{}: cannot write the response: {}\n", response_path,
                 std::strerror(errno));
      return 1;
    }
    if (response.status == EvalStatus::kCrashed) {
      std::fclose(out);
      std::_Exit(
          3);  // a crashed (sticky-error) context must not be reused, nor its destructors run
    }
    // An unseen-shape check that failed decides the task (the evaluator's unseen_check.h): the
    // shapes after it are not evaluated.
    if (item.stop_task_on_failure && response.status == EvalStatus::kWrongResult) break;
  }
  std::fclose(out);
  return 0;
}

int child_main(int argc, char** argv, ChildDevice& device) {
  const ChildArgs args = child_args(argc, argv);
  if (args.request.empty() || args.response.empty()) {
    fmt::print(stderr, "usage: {} --request FILE --response FILE [--device N]\n", argv[0]);
    return 2;
  }
  auto json = read_json_file(args.request);
  auto request = json ? child_request_from_json(*json, args.request)
                      : Result<ChildRequest>(tl::unexpected(json.error()));
  if (!request) {
    fmt::print(stderr, "{}\n", request.error().message);
    return 2;
  }
  if (request->task) {
    auto loader = child::make_shared_object_loader();
    return run_child_task(*request->task, device, *loader, args.response);
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
