#include "atrex/runner/dump.h"

#include <unistd.h>

#include <fmt/format.h>

#include "atrex/common/process/subprocess.h"
#include "atrex/runner/environment.h"
#include "atrex/common/wire/child_protocol.h"

namespace atrex::runner {
namespace fs = std::filesystem;

Result<ChildDumpResponse> run_dump(Backend backend, int device, const std::vector<DumpItem>& items,
                                   const fs::path& work_dir, std::chrono::milliseconds timeout) {
  std::error_code ec;
  fs::create_directories(work_dir, ec);
  if (ec) return io_error(fmt::format("{}: {}", work_dir.string(), ec.message()));
  const std::string stem = (work_dir / fmt::format(".dump-{}", ::getpid())).string();
  const fs::path req = stem + ".request.json", resp = stem + ".response.json";
  ATREX_TRY(write_text_file_atomic(req, to_json(ChildRequest{{}, ChildDumpRequest{items}}).dump()));
  SubprocessOptions opt;
  opt.argv = {(default_child_dir() / eval_child_name(backend)).string(),
              "--request",
              req.string(),
              "--response",
              resp.string(),
              "--device",
              std::to_string(device)};
  opt.timeout = timeout;
  auto proc = run_subprocess(opt);
  auto response = read_json_file(resp);
  fs::remove(req, ec);
  fs::remove(resp, ec);
  if (!proc) return tl::unexpected(proc.error());
  if (!response) {
    return make_error(ErrorCode::kInternal,
                      fmt::format("the {} evaluation child gave no result ({}): {}",
                                  backend_name(backend), proc->describe(), proc->output_tail));
  }
  return child_dump_response_from_json(*response, resp.string());
}

}  // namespace atrex::runner
