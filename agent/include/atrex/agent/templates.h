// Parameterised kernel templates of the built-in `search` provider (docs/architecture.md §7).
//
// A template is a complete candidate source (kernels/templates/<op>/<backend>/<name>.<ext>)
// whose tunable integers are macros with guarded defaults, declared in its header comment:
//   // atrex-template: block_per_row
//   // atrex-description: one thread block per row, vectorised loads
//   // atrex-param: BLOCK_THREADS = 256 | 64, 128, 256, 512, 1024
// Rendering prepends `#define NAME value` lines, so every rendered variant is an ordinary
// candidate (one file, only atrex/candidate.h needed).
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "atrex/common/error.h"
#include "atrex/common/wire/backend.h"

namespace atrex::agent {

struct TemplateParam {
  std::string name;
  std::vector<int64_t> values;  // increasing; neighbours are adjacent entries
  int64_t default_value = 0;
};

struct KernelTemplate {
  std::string op;
  Backend backend = Backend::kCpu;
  std::string name;
  std::string description;
  std::string path;  // relative to the templates folder, for audit trails
  std::string text;
  std::vector<TemplateParam> params;
};

using ParamValues = std::map<std::string, int64_t>;

class TemplateCatalog {
 public:
  // The templates compiled into the binary.
  static Result<TemplateCatalog> embedded();
  // Templates from a folder laid out as <op>/<backend>/<file>.
  static Result<TemplateCatalog> load_dir(const std::filesystem::path& dir);
  // Parses one template; `path` is "<op>/<backend>/<file>". Errors name the path and line.
  static Result<KernelTemplate> parse(const std::string& path, const std::string& text);

  std::vector<const KernelTemplate*> find(std::string_view op, Backend backend) const;
  const std::vector<KernelTemplate>& all() const { return templates_; }

 private:
  std::vector<KernelTemplate> templates_;
};

// Default values of every parameter.
ParamValues default_params(const KernelTemplate& t);
// The source with `#define NAME value` lines (and a provenance comment) prepended.
std::string render(const KernelTemplate& t, const ParamValues& values);
// "BLOCK_THREADS=256,VEC=8" (stable order), for logs and audit trails.
std::string format_params(const ParamValues& values);

}  // namespace atrex::agent
