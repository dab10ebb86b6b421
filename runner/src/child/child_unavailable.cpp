#include "child_unavailable.h"

#include <cstring>

#include <fmt/format.h>

#include "atrex/common/json_io.h"
#include "child_runner.h"

namespace atrex::runner {

int child_main_unavailable(int argc, char** argv, const std::string& status,
                           const std::string& reason, int exit_code) {
  std::string request_path, response_path;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--request") == 0) request_path = argv[i + 1];
    if (std::strcmp(argv[i], "--response") == 0) response_path = argv[i + 1];
  }
  fmt::print(stderr, "{}: {}\n", argv[0], reason);
  if (request_path.empty() || response_path.empty()) return exit_code;
  auto request = read_json_file(request_path);
  if (!request) {
    fmt::print(stderr, "{}\n", request.error().message);
    return 2;
  }
  const Json verdict{
      {"schema", kChildResponseSchema}, {"status", status}, {"error", reason}, {"seeds_passed", 0}};
  std::string text;
  if (request->contains("shapes") && (*request)["shapes"].is_array()) {
    for (const Json& item : (*request)["shapes"]) {
      Json line = verdict;
      line["shape_id"] = item.value("shape_id", "");
      line["wall_s"] = 0.0;
      text += line.dump() + "\n";
    }
  } else {
    text = verdict.dump();
  }
  if (auto w = write_text_file_atomic(response_path, text); !w) {
    fmt::print(stderr, "{}\n", w.error().message);
    return 1;
  }
  return exit_code;
}

}  // namespace atrex::runner
