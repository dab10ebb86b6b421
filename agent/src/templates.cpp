#include "atrex/agent/templates.h"

#include <algorithm>
#include <sstream>

#include <fmt/format.h>

#include "atrex/common/embedded.h"
#include "atrex/common/json_io.h"

namespace atrex::agent {
namespace fs = std::filesystem;

// Provided by the generated source of atrex_embed_files (agent/CMakeLists.txt).
namespace templates_data {
std::span<const EmbeddedFile> embedded_files();
}

namespace {

std::string trim(std::string s) {
  auto ws = [](unsigned char c) { return std::isspace(c); };
  s.erase(s.begin(), std::find_if_not(s.begin(), s.end(), ws));
  s.erase(std::find_if_not(s.rbegin(), s.rend(), ws).base(), s.end());
  return s;
}

Result<int64_t> parse_int(const std::string& s, const std::string& where) {
  try {
    size_t used = 0;
    int64_t v = std::stoll(s, &used);
    if (used != s.size()) throw std::invalid_argument(s);
    return v;
  } catch (const std::exception&) {
    return invalid_input(fmt::format("{}: expected an integer, got \"{}\"", where, s));
  }
}

}  // namespace

Result<KernelTemplate> TemplateCatalog::parse(const std::string& path, const std::string& text) {
  KernelTemplate t;
  t.path = path;
  t.text = text;
  const auto parts = fs::path(path);
  auto it = parts.begin();
  if (std::distance(parts.begin(), parts.end()) != 3) {
    return invalid_input(fmt::format("{}: template paths are <op>/<backend>/<file>", path));
  }
  t.op = (it++)->string();
  auto backend = parse_backend((it++)->string());
  if (!backend) {
    return invalid_input(fmt::format("{}: the backend folder: {}", path, backend.error().message));
  }
  t.backend = *backend;
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const std::string where = fmt::format("{}:{}", path, line_no);
    if (line.rfind("// atrex-template:", 0) == 0) {
      t.name = trim(line.substr(18));
    } else if (line.rfind("// atrex-description:", 0) == 0) {
      t.description = trim(line.substr(21));
    } else if (line.rfind("// atrex-param:", 0) == 0) {
      std::string spec = line.substr(15);
      const auto eq = spec.find('='), bar = spec.find('|');
      if (eq == std::string::npos || bar == std::string::npos || bar < eq) {
        return invalid_input(
            fmt::format("{}: expected `// atrex-param: NAME = default | v1, v2, ...`", where));
      }
      TemplateParam p;
      p.name = trim(spec.substr(0, eq));
      ATREX_ASSIGN_OR_RETURN(p.default_value,
                             parse_int(trim(spec.substr(eq + 1, bar - eq - 1)), where));
      std::istringstream vals(spec.substr(bar + 1));
      for (std::string v; std::getline(vals, v, ',');) {
        ATREX_ASSIGN_OR_RETURN(int64_t x, parse_int(trim(v), where));
        p.values.push_back(x);
      }
      if (p.values.empty() || !std::is_sorted(p.values.begin(), p.values.end())) {
        return invalid_input(
            fmt::format("{}: parameter {} needs increasing values", where, p.name));
      }
      if (std::find(p.values.begin(), p.values.end(), p.default_value) == p.values.end()) {
        return invalid_input(fmt::format("{}: default {} of {} is not among its values", where,
                                         p.default_value, p.name));
      }
      t.params.push_back(std::move(p));
    } else if (!line.empty() && line.rfind("//", 0) != 0) {
      break;  // header block ends at the first non-comment line
    }
  }
  if (t.name.empty())
    return invalid_input(fmt::format("{}: missing `// atrex-template: <name>` header", path));
  return t;
}

Result<TemplateCatalog> TemplateCatalog::embedded() {
  TemplateCatalog c;
  for (const auto& f : templates_data::embedded_files()) {
    ATREX_ASSIGN_OR_RETURN(KernelTemplate t, parse(std::string(f.path), std::string(f.content)));
    c.templates_.push_back(std::move(t));
  }
  return c;
}

Result<TemplateCatalog> TemplateCatalog::load_dir(const fs::path& dir) {
  TemplateCatalog c;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return not_found(fmt::format("{}: template folder not found", dir.string()));
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    if (e.is_regular_file()) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    ATREX_ASSIGN_OR_RETURN(std::string text, read_text_file(f));
    ATREX_ASSIGN_OR_RETURN(KernelTemplate t, parse(fs::relative(f, dir).string(), text));
    c.templates_.push_back(std::move(t));
  }
  return c;
}

std::vector<const KernelTemplate*> TemplateCatalog::find(std::string_view op,
                                                         Backend backend) const {
  std::vector<const KernelTemplate*> out;
  for (const auto& t : templates_) {
    if (t.op == op && t.backend == backend) out.push_back(&t);
  }
  return out;
}

ParamValues default_params(const KernelTemplate& t) {
  ParamValues v;
  for (const auto& p : t.params) v[p.name] = p.default_value;
  return v;
}

std::string format_params(const ParamValues& values) {
  std::string s;
  for (const auto& [k, v] : values) s += fmt::format("{}{}={}", s.empty() ? "" : ",", k, v);
  return s;
}

std::string render(const KernelTemplate& t, const ParamValues& values) {
  std::string out = fmt::format("// Generated by the atrex search agent from template {} ({}).\n",
                                t.path, format_params(values));
  for (const auto& [k, v] : values) out += fmt::format("#define {} {}\n", k, v);
  // Compiler messages then point at the template's own lines.
  out += fmt::format("#line 1 \"templates/{}\"\n", t.path);
  return out + t.text;
}

}  // namespace atrex::agent
