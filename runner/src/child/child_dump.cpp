// The evaluation child's dump mode (`atrex problems dump`): for each requested (operator,
// shape, seed), draw the inputs and run the reference on this child's backend, then write
// every tensor as a raw little-endian file plus manifest.json (atrex.dump/1) into the item's
// folder. Used to cross-check the references against an independent implementation
// (deploy/gpu/xcheck.py, docs/evaluation.md); never by the gates themselves.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "atrex/problems/operator.h"
#include "child_runner.h"

namespace atrex::runner {
namespace {
namespace fs = std::filesystem;

inline constexpr const char* kDumpSchema = "atrex.dump/1";

// Device buffers of one item, released when it is done.
class ItemBuffers {
 public:
  explicit ItemBuffers(ChildDevice& d) : dev_(d) {}
  ~ItemBuffers() {
    for (void* p : owned_) dev_.release(p);
  }
  ItemBuffers(const ItemBuffers&) = delete;
  ItemBuffers& operator=(const ItemBuffers&) = delete;
  void* alloc(size_t bytes, std::string& error) {
    void* p = dev_.alloc(std::max<size_t>(bytes, 16), error);
    if (p) owned_.push_back(p);
    return p;
  }

 private:
  ChildDevice& dev_;
  std::vector<void*> owned_;
};

// How the correctness gate compares an output (compare.h): the operator's own rule, exact
// equality for integers, else allclose (with the low-signal rule).
std::string comparison_of(const problems::TensorSpec& spec, problems::DType dtype) {
  if (spec.compare) return "custom";
  return problems::dtype_is_float(dtype) ? "allclose" : "exact";
}

Json tensor_entry(const problems::TensorDesc& d, const std::string& role, const std::string& file) {
  return Json{{"name", d.name}, {"role", role}, {"dtype", problems::dtype_name(d.dtype)},
              {"dims", d.dims}, {"file", file}, {"bytes", d.bytes()}};
}

std::string write_file(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return fmt::format("cannot write {}", path.string());
  return {};
}

class DumpItem {
 public:
  DumpItem(const Json& item, ChildDevice& dev) : item_(item), dev_(dev), buffers_(dev) {}

  // "" on success, else the error; `crashed` tells a device failure (sticky on CUDA) from bad
  // input.
  std::string run(bool& crashed) {
    const auto* def = problems::find_native_operator(item_.value("operator", ""));
    if (!def) return "operator has no native definition: " + item_.value("operator", "");
    problems::Shape shape;
    shape.id = item_.value("shape_id", "");
    shape.params = item_.value("params", Json::object());
    auto resolved = problems::resolve_shape(*def, shape);
    if (!resolved) return resolved.error().message;
    shape_ = std::move(*resolved);
    out_dir_ = item_.value("out_dir", "");
    std::error_code ec;
    fs::create_directories(out_dir_, ec);
    if (ec) return fmt::format("cannot create {}: {}", out_dir_.string(), ec.message());
    if (auto e = compute(); !e.empty()) {
      crashed = true;
      return e;
    }
    return write(*def);
  }

 private:
  std::string compute() {
    std::string err;
    for (const auto& d : shape_.inputs) {
      in_.push_back(buffers_.alloc(d.bytes(), err));
      if (!err.empty()) return "allocating inputs: " + err;
    }
    for (const auto& d : shape_.outputs) {
      out_.push_back(buffers_.alloc(d.bytes(), err));
      if (!err.empty()) return "allocating outputs: " + err;
    }
    const uint64_t seed = item_.value("seed", uint64_t{1});
    for (size_t i = 0; i < shape_.inputs.size(); ++i) {
      if (auto e = dev_.generate(shape_, i, seed, in_[i]); !e.empty())
        return "generating inputs: " + e;
    }
    // Outputs start as the gate starts the reference's: a copy of their initial_from input
    // (in-place semantics), else poison (0xFF bytes).
    for (size_t i = 0; i < shape_.outputs.size(); ++i) {
      const std::string& from = shape_.def->outputs[i].initial_from;
      std::string e = dev_.fill(out_[i], 0xFF, shape_.outputs[i].bytes());
      for (size_t k = 0; k < shape_.inputs.size() && !from.empty(); ++k) {
        if (shape_.inputs[k].name == from)
          e = dev_.copy(out_[i], in_[k], shape_.outputs[i].bytes());
      }
      if (!e.empty()) return "initialising outputs: " + e;
    }
    std::vector<const void*> in(in_.begin(), in_.end());
    if (auto e = dev_.reference(shape_, in, out_); !e.empty()) return "reference: " + e;
    if (auto e = dev_.synchronize(); !e.empty()) return "reference: " + e;
    return {};
  }

  std::string dump_tensor(const problems::TensorDesc& d, const void* src, const std::string& role,
                          Json& tensors, Json extra) {
    std::vector<uint8_t> host(d.bytes());
    if (auto e = dev_.to_host(host.data(), src, host.size()); !e.empty())
      return "copy to host: " + e;
    const std::string file = fmt::format("{}.{}.bin", role, d.name);
    if (auto e = write_file(out_dir_ / file, host); !e.empty()) return e;
    Json entry = tensor_entry(d, role, file);
    entry.update(extra);
    tensors.push_back(std::move(entry));
    return {};
  }

  std::string write(const problems::OperatorDef& def) {
    Json tensors = Json::array();
    for (size_t i = 0; i < shape_.inputs.size(); ++i) {
      if (auto e = dump_tensor(shape_.inputs[i], in_[i], "input", tensors, Json::object());
          !e.empty())
        return e;
    }
    for (size_t i = 0; i < shape_.outputs.size(); ++i) {
      const auto& spec = def.outputs[i];
      Json extra{{"compare", comparison_of(spec, shape_.outputs[i].dtype)}};
      if (!spec.initial_from.empty()) extra["initial_from"] = spec.initial_from;
      if (auto e = dump_tensor(shape_.outputs[i], out_[i], "output", tensors, extra); !e.empty())
        return e;
    }
    const bool own_tolerance = def.atol.has_value() || def.rtol.has_value();
    Json manifest{{"schema", kDumpSchema},
                  {"operator", def.name},
                  {"shape_id", shape_.shape_id},
                  {"seed", item_.value("seed", uint64_t{1})},
                  {"backend", item_.value("backend", "")},
                  {"device", dev_.name()},
                  {"byte_order", "little"},
                  {"init_kwargs", item_.value("init_kwargs", Json::object())},
                  {"input_kwargs", item_.value("input_kwargs", Json::object())},
                  {"params", shape_.params},
                  {"atol", def.atol.value_or(item_.value("atol", 1e-2))},
                  {"rtol", def.rtol.value_or(item_.value("rtol", 5e-2))},
                  {"tolerance_source", own_tolerance ? "operator" : "sweep default"},
                  {"semantics", def.semantics},
                  {"tensors", tensors}};
    auto w = write_text_file_atomic(out_dir_ / "manifest.json", manifest.dump(2) + "\n");
    if (!w) return w.error().message;
    return {};
  }

  const Json& item_;
  ChildDevice& dev_;
  ItemBuffers buffers_;
  problems::ResolvedShape shape_;
  fs::path out_dir_;
  std::vector<void*> in_, out_;
};

}  // namespace

Json run_child_dump(const Json& request, ChildDevice& device) {
  Json items = Json::array();
  bool crashed = false;
  for (const Json& item : request.value("items", Json::array())) {
    Json r{{"operator", item.value("operator", "")},
           {"shape_id", item.value("shape_id", "")},
           {"out_dir", item.value("out_dir", "")}};
    if (crashed) {  // a sticky device error poisons the rest of this process
      r["status"] = "skipped";
      r["error"] = "not run: an earlier item crashed the device context";
      items.push_back(r);
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::string error;
    {
      DumpItem run(item, device);
      error = run.run(crashed);
    }
    r["status"] = error.empty() ? "ok" : (crashed ? "crashed" : "rejected");
    r["error"] = error;
    r["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    items.push_back(r);
  }
  return Json{{"schema", kChildResponseSchema},
              {"mode", "dump"},
              {"device", device.name()},
              {"items", items},
              {"status", crashed ? "crashed" : "ok"}};
}

}  // namespace atrex::runner
