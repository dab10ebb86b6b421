// `atrex compile FILE...`: the compile gate alone, into the shared content-addressed cache, so
// that a sweep's runners (or a GPU machine the cache folder is carried to) start warm.
#include <fmt/format.h>

#include "atrex/common/hash.h"
#include "atrex/runner/compile.h"
#include "atrex/common/process/sandbox.h"
#include "atrex/runner/environment.h"
#include "atrex/runner/evaluator.h"
#include "cli.h"

namespace atrex::cli {
namespace {
namespace fs = std::filesystem;

struct CompileArgs {
  std::vector<std::string> files;
  std::string backend = "auto";
  std::string arch = "auto";
  double timeout_s = 300;
  bool no_sandbox = false;
};

int run_compile(const GlobalOptions& g, const CompileArgs& a) {
  runner::CompileCache cache(runner::default_cache_dir(), runner::default_include_dir());
  // The compiler runs in the compile sandbox as in `atrex eval` (the sources may be an agent's;
  // the 2026-12-06 attack read host files into an object here and had it served to a sandboxed
  // eval from the cache). --no-sandbox compiles are cached under keys of their own.
  const SandboxMode mode = a.no_sandbox ? SandboxMode::kNone : SandboxMode::kBwrap;
  if (auto ready = runner::sandbox_ready(mode); !ready) return fail(ready.error());
  if (mode == SandboxMode::kBwrap) cache.sandbox_with(bwrap_program(runner::default_child_dir()));
  int rc = 0;
  Json results = Json::array();
  for (const auto& file : a.files) {
    auto source = read_text_file(file);
    if (!source) return fail(source.error());
    auto backend = backend_for(a.backend, file);
    if (!backend) return fail(backend.error());
    const std::string arch = a.arch == "auto" ? runner::default_arch(*backend) : a.arch;
    CandidateRef c;
    c.source = *source;
    c.sha256 = sha256_hex(*source);
    c.backend = *backend;
    c.file_name = fs::path(file).filename().string();
    auto out = cache.compile(c, arch, a.timeout_s);
    if (!out) return fail(out.error());
    if (!out->ok) rc = 1;
    if (g.json) {
      results.push_back(Json{{"file", file},
                             {"backend", backend_name(*backend)},
                             {"arch", arch},
                             {"ok", out->ok},
                             {"cache_hit", out->cache_hit},
                             {"wall_s", out->wall_s},
                             {"key", out->key},
                             {"log", out->log}});
    } else {
      fmt::print("{:<60} {:<5} {:<8} {:<6} {:6.2f} s{}  {}\n", file, backend_name(*backend), arch,
                 out->ok ? "ok" : "FAILED", out->wall_s, out->cache_hit ? " (cache hit)" : "",
                 out->key.substr(0, 16));
      if (!out->ok) fmt::print("{}\n", out->log);
    }
  }
  if (g.json)
    fmt::print("{}\n", Json{{"schema", "atrex.compile/1"},
                            {"cache_dir", runner::default_cache_dir().string()},
                            {"results", results}}
                           .dump(2));
  return rc;
}

}  // namespace

void add_compile_command(CLI::App& app, GlobalOptions& g, int& rc) {
  static CompileArgs a;
  auto* c = app.add_subcommand(
      "compile",
      "Run only the compile gate for candidates, filling the shared compile cache "
      "($ATREX_CACHE_DIR). Exit code 0: all compiled; 1: some failed; 2: bad input");
  c->add_option("files", a.files, "Candidate sources (.cu cuda, .cpp cpu, .hip hip)")->required();
  c->add_option("--backend", a.backend, "auto (from the extension), cpu, cuda or hip")
      ->capture_default_str();
  c->add_option(
       "--arch", a.arch,
       "Target: auto (the local GPU, else sm_90a for cuda and $ATREX_HIP_ARCH or gfx942 for hip), "
       "e.g. sm_90a, sm_100, gfx942, gfx90a")
      ->capture_default_str();
  c->add_option("--timeout", a.timeout_s, "Compiler time limit per file, seconds")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  add_no_sandbox_flag(*c, a.no_sandbox,
                      "Run the compiler WITHOUT the compile sandbox (it reads what this user can "
                      "read); such objects are cached apart and never serve a sandboxed "
                      "evaluation. Default from $ATREX_NO_SANDBOX=1");
  c->add_flag("--json", g.json, "Machine-readable output (atrex.compile/1)");
  c->callback([&] { rc = run_compile(g, a); });
}

}  // namespace atrex::cli
