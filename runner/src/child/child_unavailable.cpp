#include "child_unavailable.h"

#include <cstring>

#include <fmt/format.h>

#include "atrex/common/json_io.h"
#include "child_runner.h"
#include "atrex/common/wire/child_protocol.h"

namespace atrex::runner {

int child_main_unavailable(int argc, char** argv, EvalStatus status, const std::string& reason,
                           int exit_code) {
  const ChildArgs args = child_args(argc, argv);
  fmt::print(stderr, "{}: {}\n", argv[0], reason);
  const bool task_mode = args.request_fd >= 0 && args.response_fd >= 0;
  if (!task_mode && (args.request.empty() || args.response.empty())) return exit_code;
  auto request = read_child_request(args);
  if (!request) {
    fmt::print(stderr, "{}\n", request.error().message);
    return 2;
  }
  std::string text;
  if (request->task) {
    if (!task_mode) return 2;
    for (const ChildShape& item : request->task->shapes) {
      ChildShapeResponse line;
      line.nonce = request->task->nonce;
      line.shape_id = item.shape_id;
      line.status = status;
      line.error = reason;
      text += to_json(line).dump() + "\n";
    }
    if (auto w = write_response_line(args.response_fd, text); !w) {
      fmt::print(stderr, "{}\n", w.error().message);
      return 1;
    }
    return exit_code;
  } else {
    ChildDumpResponse dump;
    dump.crashed = status == EvalStatus::kCrashed;
    for (const DumpItem& item : request->dump->items) {
      dump.items.push_back(DumpItemResult{item.operator_name, item.shape_id,
                                          eval_status_name(status), reason, item.out_dir, 0});
    }
    text = to_json(dump).dump();
  }
  if (auto w = write_text_file_atomic(args.response, text); !w) {
    fmt::print(stderr, "{}\n", w.error().message);
    return 1;
  }
  return exit_code;
}

}  // namespace atrex::runner
