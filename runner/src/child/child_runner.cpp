// The evaluation child's entry (child_runner.h): one shape, a task's shapes in order (task
// mode), or a dump. The work of one shape is ShapeRun's (shape_run.h).
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

Json run_child_shape(const Json& request, ChildDevice& device) {
  child::ShapeRun run(request, device);
  return run.run();
}

namespace {

std::atomic<bool> g_stop_requested{false};
extern "C" void on_stop_signal(int) { g_stop_requested.store(true); }

// Task mode (request "shapes": [{shape_id, params, seeds}, ...]): one process evaluates the
// shapes in order and appends each response as one JSON line to the response file as soon as
// it is known, so the runner sees progress and, after a crash or a timeout, knows which shape
// was in hand. Stops after a crashed shape (the context may be unusable), after a wrong_result
// of an item marked "stop_task_on_failure" (an unseen-shape check), and, on SIGUSR1, between
// shapes.
int run_child_task(const Json& request, ChildDevice& device, const std::string& response_path) {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  ::sigaction(SIGUSR1, &sa, nullptr);
  std::FILE* out = std::fopen(response_path.c_str(), "a");
  if (!out) {
    fmt::print(stderr, "{}: cannot open the response file: {}\n", response_path,
               std::strerror(errno));
    return 1;
  }
  Json common = request;
  common.erase("shapes");
  for (const Json& item : request["shapes"]) {
    if (g_stop_requested.load()) break;
    Json one = common;
    for (const auto& [k, v] : item.items()) one[k] = v;
    const auto t0 = std::chrono::steady_clock::now();
    Json response = run_child_shape(one, device);
    // steady_clock is CLOCK_MONOTONIC, shared with the runner: it charges the child's start to
    // the first shape.
    response["started_at_s"] = std::chrono::duration<double>(t0.time_since_epoch()).count();
    response["shape_id"] = one.value("shape_id", "");
    response["wall_s"] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string line = response.dump() + "\n";
    if (std::fwrite(line.data(), 1, line.size(), out) != line.size() || std::fflush(out) != 0) {
      fmt::print(stderr, "{}: cannot write the response: {}\n", response_path,
                 std::strerror(errno));
      return 1;
    }
    if (response.value("status", "") == "crashed") {
      std::fclose(out);
      std::_Exit(
          3);  // a crashed (sticky-error) context must not be reused, nor its destructors run
    }
    // An unseen-shape check that failed decides the task (the evaluator's unseen_check.h): the
    // shapes after it are not evaluated.
    if (item.value("stop_task_on_failure", false) && response.value("status", "") == "wrong_result")
      break;
  }
  std::fclose(out);
  return 0;
}

}  // namespace

int child_main(int argc, char** argv, ChildDevice& device) {
  std::string request_path, response_path;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--request") == 0) request_path = argv[i + 1];
    if (std::strcmp(argv[i], "--response") == 0) response_path = argv[i + 1];
  }
  if (request_path.empty() || response_path.empty()) {
    fmt::print(stderr, "usage: {} --request FILE --response FILE\n", argv[0]);
    return 2;
  }
  auto request = read_json_file(request_path);
  if (!request) {
    fmt::print(stderr, "{}\n", request.error().message);
    return 2;
  }
  if (request->contains("shapes") && (*request)["shapes"].is_array())
    return run_child_task(*request, device, response_path);
  Json response = request->value("mode", "shape") == "dump" ? run_child_dump(*request, device)
                                                            : run_child_shape(*request, device);
  auto written = write_text_file_atomic(response_path, response.dump());
  if (!written) {
    fmt::print(stderr, "{}\n", written.error().message);
    return 1;
  }
  // A crashed (sticky-error) context must not be reused: exit without running destructors
  // that would touch it again.
  if (response.value("status", "") == "crashed") std::_Exit(3);
  return 0;
}

}  // namespace atrex::runner
