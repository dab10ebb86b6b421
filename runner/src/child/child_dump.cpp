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
#include "shape_run_support.h"

namespace atrex::runner {
namespace {
namespace fs = std::filesystem;

inline constexpr const char* kDumpSchema = "atrex.dump/1";

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

Status write_file(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return io_error(fmt::format("cannot write {}", path.string()));
  return ok();
}

class DumpRun {
 public:
  DumpRun(const DumpItem& item, ChildDevice& dev) : item_(item), dev_(dev), buffers_(dev) {}

  // ok, or the error; `crashed` tells a device failure (sticky on CUDA) from bad input.
  Status run(bool& crashed) {
    const auto* def = problems::find_native_operator(item_.operator_name);
    if (!def) return not_found("operator has no native definition: " + item_.operator_name);
    problems::Shape shape;
    shape.id = item_.shape_id;
    shape.params = item_.params;
    ATREX_ASSIGN_OR_RETURN(shape_, problems::resolve_shape(*def, shape));
    out_dir_ = item_.out_dir;
    std::error_code ec;
    fs::create_directories(out_dir_, ec);
    if (ec) return io_error(fmt::format("cannot create {}: {}", out_dir_.string(), ec.message()));
    if (auto computed = compute(); !computed) {
      crashed = true;
      return computed;
    }
    return write(*def);
  }

 private:
  Status compute() {
    auto take = [&](size_t bytes, std::vector<void*>& into, const char* what) -> Status {
      auto p = buffers_.alloc(bytes);
      if (!p) return tl::unexpected(with_context(p.error(), what));
      into.push_back(*p);
      return ok();
    };
    for (const auto& d : shape_.inputs) ATREX_TRY(take(d.bytes(), in_, "allocating inputs"));
    for (const auto& d : shape_.outputs) ATREX_TRY(take(d.bytes(), out_, "allocating outputs"));
    for (size_t i = 0; i < shape_.inputs.size(); ++i) {
      if (auto g = dev_.generate(shape_, i, item_.seed, in_[i]); !g) {
        return tl::unexpected(with_context(g.error(), "generating inputs"));
      }
    }
    // Outputs start as the gate starts the reference's: a copy of their initial_from input
    // (in-place semantics), else poison (0xFF bytes).
    for (size_t i = 0; i < shape_.outputs.size(); ++i) {
      const std::string& from = shape_.def->outputs[i].initial_from;
      Status e = dev_.fill(out_[i], 0xFF, shape_.outputs[i].bytes());
      for (size_t k = 0; k < shape_.inputs.size() && !from.empty(); ++k) {
        if (shape_.inputs[k].name == from) {
          e = dev_.copy(out_[i], in_[k], shape_.outputs[i].bytes());
        }
      }
      if (!e) return tl::unexpected(with_context(e.error(), "initialising outputs"));
    }
    std::vector<const void*> in(in_.begin(), in_.end());
    if (auto r = dev_.reference(shape_, in, out_); !r) {
      return tl::unexpected(with_context(r.error(), "reference"));
    }
    if (auto r = dev_.synchronize(); !r)
      return tl::unexpected(with_context(r.error(), "reference"));
    return ok();
  }

  Status dump_tensor(const problems::TensorDesc& d, const void* src, const std::string& role,
                     Json& tensors, Json extra) {
    std::vector<uint8_t> host(d.bytes());
    if (auto c = dev_.to_host(host.data(), src, host.size()); !c) {
      return tl::unexpected(with_context(c.error(), "copy to host"));
    }
    const std::string file = fmt::format("{}.{}.bin", role, d.name);
    ATREX_TRY(write_file(out_dir_ / file, host));
    Json entry = tensor_entry(d, role, file);
    entry.update(extra);
    tensors.push_back(std::move(entry));
    return ok();
  }

  Status write(const problems::OperatorDef& def) {
    Json tensors = Json::array();
    for (size_t i = 0; i < shape_.inputs.size(); ++i) {
      ATREX_TRY(dump_tensor(shape_.inputs[i], in_[i], "input", tensors, Json::object()));
    }
    for (size_t i = 0; i < shape_.outputs.size(); ++i) {
      const auto& spec = def.outputs[i];
      Json extra{{"compare", comparison_of(spec, shape_.outputs[i].dtype)}};
      if (!spec.initial_from.empty()) extra["initial_from"] = spec.initial_from;
      ATREX_TRY(dump_tensor(shape_.outputs[i], out_[i], "output", tensors, extra));
    }
    const bool own_tolerance = def.atol.has_value() || def.rtol.has_value();
    Json manifest{{"schema", kDumpSchema},
                  {"operator", def.name},
                  {"shape_id", shape_.shape_id},
                  {"seed", item_.seed},
                  {"backend", item_.backend},
                  {"device", dev_.name()},
                  {"byte_order", "little"},
                  {"init_kwargs", item_.init_kwargs},
                  {"input_kwargs", item_.input_kwargs},
                  {"params", shape_.params},
                  {"atol", def.atol.value_or(item_.atol)},
                  {"rtol", def.rtol.value_or(item_.rtol)},
                  {"tolerance_source", own_tolerance ? "operator" : "sweep default"},
                  {"semantics", def.semantics},
                  {"tensors", tensors}};
    return write_text_file_atomic(out_dir_ / "manifest.json", manifest.dump(2) + "\n");
  }

  const DumpItem& item_;
  ChildDevice& dev_;
  child::Buffers buffers_;
  problems::ResolvedShape shape_;
  fs::path out_dir_;
  std::vector<void*> in_, out_;
};

}  // namespace

ChildDumpResponse run_child_dump(const ChildDumpRequest& request, ChildDevice& device) {
  ChildDumpResponse response;
  response.device = device.name();
  for (const DumpItem& item : request.items) {
    DumpItemResult r{item.operator_name, item.shape_id, "", "", item.out_dir, 0};
    if (response.crashed) {  // a sticky device error poisons the rest of this process
      r.status = "skipped";
      r.error = "not run: an earlier item crashed the device context";
      response.items.push_back(r);
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    Status done = ok();
    {
      DumpRun run(item, device);
      done = run.run(response.crashed);
    }
    r.status = done ? "ok" : (response.crashed ? "crashed" : "rejected");
    r.error = done ? "" : done.error().message;
    r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    response.items.push_back(r);
  }
  return response;
}

}  // namespace atrex::runner
