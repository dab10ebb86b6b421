#include "atrex/problems/hardware.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include <fmt/format.h>

#include "atrex/common/json_io.h"
#include "atrex/problems/suite.h"

namespace atrex::problems {
namespace fs = std::filesystem;

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return out;
}

Result<std::string> optional_string(const JsonField& f, const char* key) {
  if (!f.has(key) || f.value()[key].is_null()) return std::string();
  ATREX_ASSIGN_OR_RETURN(auto child, f.at(key));
  if (child.value().is_number()) return child.value().dump();
  return child.as_string();
}

}  // namespace

Result<HardwareProfile> load_hardware_profile(const fs::path& file) {
  ATREX_ASSIGN_OR_RETURN(std::string text, read_text_file(file));
  ATREX_ASSIGN_OR_RETURN(Json j, parse_yaml_to_json(text, file.string()));
  JsonField root(j, file.string());
  ATREX_TRY(root.expect_object());
  HardwareProfile p;
  p.file = file;
  ATREX_ASSIGN_OR_RETURN(auto hw, root.at("hardware"));
  ATREX_ASSIGN_OR_RETURN(auto name, hw.at("name"));
  ATREX_ASSIGN_OR_RETURN(p.name, name.as_string());
  ATREX_ASSIGN_OR_RETURN(p.arch, optional_string(hw, "arch"));
  ATREX_ASSIGN_OR_RETURN(p.vendor, optional_string(hw, "vendor"));
  ATREX_ASSIGN_OR_RETURN(auto peaks, root.at("p_peak"));
  ATREX_TRY(peaks.expect_object());
  if (peaks.value().empty()) return peaks.fail("expected at least one path -> FLOP/s entry");
  for (auto& [path, v] : peaks.value().items()) {
    JsonField pf(v, file.string(), "p_peak." + path);
    ATREX_ASSIGN_OR_RETURN(double flops, pf.as_number());
    if (!(flops > 0)) return pf.fail("expected a positive FLOP/s value");
    p.p_peak_flops_per_s[path] = flops;
  }
  ATREX_ASSIGN_OR_RETURN(auto b, root.at("b_peak"));
  ATREX_ASSIGN_OR_RETURN(auto hbm, b.at("hbm"));
  ATREX_ASSIGN_OR_RETURN(p.hbm_bytes_per_s, hbm.as_number());
  if (!(p.hbm_bytes_per_s > 0)) return hbm.fail("expected a positive bytes/s value");
  if (root.has("memory")) {
    ATREX_ASSIGN_OR_RETURN(auto mem, root.at("memory"));
    if (mem.has("l2_bytes")) {
      ATREX_ASSIGN_OR_RETURN(auto l2, mem.at("l2_bytes"));
      ATREX_ASSIGN_OR_RETURN(p.l2_bytes, l2.as_number());
    }
  }
  if (root.has("device")) {
    ATREX_ASSIGN_OR_RETURN(auto dev, root.at("device"));
    if (dev.has("match")) {
      ATREX_ASSIGN_OR_RETURN(auto m, dev.at("match"));
      ATREX_TRY(m.expect_array());
      for (size_t i = 0; i < m.value().size(); ++i) {
        ATREX_ASSIGN_OR_RETURN(std::string s, m.element(i).as_string());
        p.match.push_back(s);
      }
    }
  }
  if (root.has("source")) {
    ATREX_ASSIGN_OR_RETURN(auto src, root.at("source"));
    ATREX_ASSIGN_OR_RETURN(p.source_doc, optional_string(src, "vendor_doc"));
    ATREX_ASSIGN_OR_RETURN(p.retrieved_at, optional_string(src, "retrieved_at"));
    ATREX_ASSIGN_OR_RETURN(p.notes, optional_string(src, "notes"));
  }
  return p;
}

std::string hardware_profile_yaml(const HardwareProfile& p) {
  auto quoted = [](const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("''") : std::string(1, c == '\n' ? ' ' : c);
    return q + "'";
  };
  std::string y = fmt::format("hardware:\n  name: {}\n  arch: {}\n  vendor: {}\n\np_peak:\n",
                              quoted(p.name), quoted(p.arch), quoted(p.vendor));
  for (const auto& [k, v] : p.p_peak_flops_per_s) y += fmt::format("  {}: {:.0f}\n", k, v);
  y += fmt::format("\nb_peak:\n  hbm: {:.0f}\n", p.hbm_bytes_per_s);
  if (p.l2_bytes > 0) y += fmt::format("\nmemory:\n  l2_bytes: {:.0f}\n", p.l2_bytes);
  if (!p.match.empty()) {
    y += "\ndevice:\n  match:\n";
    for (const auto& m : p.match) y += "    - " + quoted(m) + "\n";
  }
  y += fmt::format("\nsource:\n  vendor_doc: {}\n  retrieved_at: {}\n  notes: {}\n",
                   quoted(p.source_doc), quoted(p.retrieved_at), quoted(p.notes));
  return y;
}

Result<std::vector<HardwareProfile>> load_hardware_profiles(const std::vector<fs::path>& dirs) {
  std::vector<HardwareProfile> out;
  for (const auto& dir : dirs) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
      return not_found(fmt::format("{}: hardware profile folder not found", dir.string()));
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.path().extension() == ".yaml" || e.path().extension() == ".yml")
        files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      ATREX_ASSIGN_OR_RETURN(HardwareProfile p, load_hardware_profile(f));
      auto same = std::find_if(out.begin(), out.end(),
                               [&](const auto& q) { return lower(q.name) == lower(p.name); });
      if (same != out.end()) {
        *same = std::move(p);
      } else {
        out.push_back(std::move(p));
      }
    }
  }
  return out;
}

Result<std::vector<HardwareProfile>> load_default_hardware_profiles(const fs::path& suite_dir) {
  std::vector<std::filesystem::path> dirs{suite_dir / "configs" / "hardware",
                                          default_hardware_dir()};
  // The user's own profiles (e.g. written by `atrex hardware measure --out`) come last and win.
  if (const char* extra = std::getenv("ATREX_HARDWARE_DIR"); extra && *extra)
    dirs.emplace_back(extra);
  return load_hardware_profiles(dirs);
}

Result<HardwareProfile> find_hardware_profile(const std::vector<HardwareProfile>& profiles,
                                              std::string_view name) {
  // A path (docs/hardware.md: `--hardware path/to/file.yaml`): that file, strictly read.
  if (name.find('/') != std::string_view::npos || name.ends_with(".yaml") ||
      name.ends_with(".yml")) {
    return load_hardware_profile(std::filesystem::path(std::string(name)));
  }
  for (const auto& p : profiles) {
    if (lower(p.name) == lower(name)) return p;
  }
  std::vector<std::string> names;
  for (const auto& p : profiles) names.push_back(p.name);
  return not_found(fmt::format("unknown hardware profile \"{}\"; known profiles: {}", name,
                               fmt::join(names, ", ")));
}

std::optional<HardwareProfile> match_hardware_profile(const std::vector<HardwareProfile>& profiles,
                                                      std::string_view device_name) {
  const std::string dev = lower(device_name);
  for (const auto& p : profiles) {
    for (const auto& m : p.match) {
      if (!m.empty() && dev.find(lower(m)) != std::string::npos) return p;
    }
  }
  return std::nullopt;
}

HardwareSummary hardware_summary(const HardwareProfile& p) {
  return HardwareSummary{p.name, p.p_peak_flops_per_s, p.hbm_bytes_per_s, p.source_doc};
}

HardwareProfile hardware_from_summary(const HardwareSummary& s) {
  HardwareProfile p;
  p.name = s.name;
  p.p_peak_flops_per_s = s.p_peak;
  p.hbm_bytes_per_s = s.hbm_bytes_per_s;
  p.source_doc = s.source;
  return p;
}

}  // namespace atrex::problems
