// The `fixed` provider (fixed_provider.h): one given kernel per operator, proposed once.
#include "atrex/agent/fixed_provider.h"

#include <map>
#include <mutex>

#include <fmt/format.h>

#include "atrex/common/hash.h"
#include "atrex/common/wire/kernel_index.h"
#include "openai/prompt.h"

namespace atrex::agent {
namespace fs = std::filesystem;

namespace {

bool matches_backend(const fs::path& p, Backend backend) {
  const std::string ext = p.extension().string();
  return ext == source_extension(backend) || ext == ".py";
}

Result<FixedKernel> from_results_folder(const fs::path& dir, const std::string& op,
                                        Backend backend) {
  const fs::path index_file = dir / "kernels" / "index.json";
  ATREX_ASSIGN_OR_RETURN(Json j, read_json_file(index_file));
  ATREX_ASSIGN_OR_RETURN(KernelIndex index, kernel_index_from_json(j, index_file.string()));
  if (index.backend != backend) {
    return not_found(fmt::format("{}: its kernels are for the {} backend, this sweep runs {}",
                                 index_file.string(), backend_name(index.backend),
                                 backend_name(backend)));
  }
  const KernelIndexEntry* best = nullptr;
  for (const auto& k : index.kernels) {
    if (k.op == op && k.s_i > 0 && (!best || k.s_i > best->s_i)) best = &k;
  }
  if (!best) {
    return not_found(
        fmt::format("{} has no kernel of {} with S_i > 0", index_file.string(), op));
  }
  ATREX_ASSIGN_OR_RETURN(std::string source, read_text_file(dir / best->file));
  if (sha256_hex(source) != best->sha256) {
    return invalid_input(fmt::format("{}: {} has sha256 {}, the index says {}",
                                     index_file.string(), best->file, sha256_hex(source),
                                     best->sha256));
  }
  FixedKernel k;
  k.file_name = fs::path(best->file).filename().string();
  k.source = std::move(source);
  k.provenance = Json{{"kernels", dir.string()},
                      {"file", best->file},
                      {"agent", best->agent},
                      {"s_i", best->s_i},
                      {"sweep_id", index.sweep_id}};
  return k;
}

Result<FixedKernel> from_folder(const fs::path& dir, const std::string& op, Backend backend) {
  std::error_code ec;
  const fs::path op_dir = dir / op;
  std::vector<fs::path> files;
  if (fs::is_directory(op_dir, ec)) {
    for (const auto& e : fs::directory_iterator(op_dir, ec)) {
      if (e.is_regular_file() && matches_backend(e.path(), backend)) files.push_back(e.path());
    }
  }
  if (files.empty()) {
    return not_found(fmt::format("no {} (or .py) kernel of {} in {}", source_extension(backend),
                                 op, op_dir.string()));
  }
  if (files.size() > 1) {
    return invalid_input(fmt::format("{} holds {} kernels for the {} backend ({}, {}, ...): "
                                     "keep one",
                                     op_dir.string(), files.size(), backend_name(backend),
                                     files[0].filename().string(), files[1].filename().string()));
  }
  ATREX_ASSIGN_OR_RETURN(std::string source, read_text_file(files.front()));
  return FixedKernel{std::move(source), files.front().filename().string(),
                     Json{{"kernels", dir.string()}, {"file", files.front().string()}}};
}

class FixedProvider final : public Provider {
 public:
  explicit FixedProvider(std::string kernels) : kernels_(std::move(kernels)) {}
  std::string name() const override { return "fixed"; }
  // Nothing to explore: one generation, no direction.
  std::vector<Direction> directions(const AgentTask&) const override { return {}; }

  Result<std::optional<Proposal>> propose(const ProposalContext& ctx) override {
    ATREX_ASSIGN_OR_RETURN(FixedKernel k, find_fixed_kernel(kernels_, ctx.op, ctx.backend));
    // Measured already (an earlier iteration, or a resumed sweep): nothing new to try, so the
    // loop ends and the kernel, when correct, gets its full evaluation.
    if (ctx.tried->contains(sha256_hex(k.source))) return std::nullopt;
    Proposal p;
    p.source = std::move(k.source);
    p.file_name = std::move(k.file_name);
    p.provenance = std::move(k.provenance);
    p.rationale = "a fixed kernel, re-measured (provider fixed)";
    return p;
  }

 private:
  std::string kernels_;
};

class FixedFactory final : public ProviderFactory {
 public:
  std::string name() const override { return "fixed"; }
  std::vector<std::string> option_keys() const override { return {"kernels"}; }
  Result<Json> parse_options(const JsonField& agent) const override {
    if (!agent.has("kernels")) {
      return agent.fail("provider fixed needs \"kernels\": reference, a results folder or a "
                        "kernel folder");
    }
    ATREX_ASSIGN_OR_RETURN(auto t, agent.at("kernels"));
    ATREX_ASSIGN_OR_RETURN(std::string where, t.as_string());
    if (where == "reference") return Json{{"kernels", where}};
    fs::path p(where);
    if (p.is_relative() && !agent.source().empty() && agent.source().front() != '<') {
      p = fs::absolute(fs::path(agent.source()).parent_path() / p);
    }
    std::error_code ec;
    if (where.empty() || !fs::is_directory(p, ec)) return t.fail("kernel folder not found");
    if (fs::exists(p / "manifest.json", ec) && !fs::exists(p / "kernels" / "index.json", ec)) {
      return t.fail("a results folder without kernels/index.json (written when a sweep's "
                    "reports are written; run `atrex report` on it)");
    }
    return Json{{"kernels", p.lexically_normal().string()}};
  }
  Result<std::unique_ptr<Provider>> make(const AgentSpec& spec) const override {
    const std::string kernels = spec.options.value("kernels", "");
    if (kernels.empty()) return invalid_input("provider fixed: no \"kernels\" option");
    return std::unique_ptr<Provider>(std::make_unique<FixedProvider>(kernels));
  }
};

}  // namespace

Result<FixedKernel> find_fixed_kernel(const std::string& kernels, const std::string& op,
                                      Backend backend) {
  if (kernels == "reference") {
    auto ref = openai::reference_source(op, backend);
    if (!ref) return not_found(fmt::format("no reference candidate of {} for {}", op,
                                           backend_name(backend)));
    FixedKernel k;
    k.source = std::move(ref->second);
    // The runner builds by the backend; a hip build of naive.cu keeps the hip extension.
    k.file_name = std::string("naive") + source_extension(backend);
    k.provenance = Json{{"kernels", "reference"}, {"file", ref->first}};
    return k;
  }
  const fs::path dir(kernels);
  std::error_code ec;
  if (fs::exists(dir / "manifest.json", ec)) return from_results_folder(dir, op, backend);
  return from_folder(dir, op, backend);
}

Result<std::shared_ptr<ProviderFactory>> make_fixed_provider_factory() {
  return std::shared_ptr<ProviderFactory>(std::make_shared<FixedFactory>());
}

}  // namespace atrex::agent
