#include "child_unavailable.h"

#include <cstring>

#include <fmt/format.h>

#include "atrex/common/json_io.h"
#include "protocol/child_protocol.h"

namespace atrex::runner {

int child_main_unavailable(int argc, char** argv, EvalStatus status, const std::string& reason,
                           int exit_code) {
  std::string request_path, response_path;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--request") == 0) request_path = argv[i + 1];
    if (std::strcmp(argv[i], "--response") == 0) response_path = argv[i + 1];
  }
  fmt::print(stderr, "{}: {}\n", argv[0], reason);
  if (request_path.empty() || response_path.empty()) return exit_code;
  auto json = read_json_file(request_path);
  auto request = json ? child_request_from_json(*json, request_path)
                      : Result<ChildRequest>(tl::unexpected(json.error()));
  if (!request) {
    fmt::print(stderr, "{}\n", request.error().message);
    return 2;
  }
  std::string text;
  if (request->task) {
    for (const ChildShape& item : request->task->shapes) {
      ChildShapeResponse line;
      line.shape_id = item.shape_id;
      line.status = status;
      line.error = reason;
      text += to_json(line).dump() + "\n";
    }
  } else {
    ChildDumpResponse dump;
    dump.crashed = status == EvalStatus::kCrashed;
    for (const DumpItem& item : request->dump->items) {
      dump.items.push_back(DumpItemResult{item.operator_name, item.shape_id,
                                          eval_status_name(status), reason, item.out_dir, 0});
    }
    text = to_json(dump).dump();
  }
  if (auto w = write_text_file_atomic(response_path, text); !w) {
    fmt::print(stderr, "{}\n", w.error().message);
    return 1;
  }
  return exit_code;
}

}  // namespace atrex::runner
