#include "atrex/common/wire/kernel_index.h"

#include "atrex/common/wire/reader.h"

namespace atrex {

Json to_json(const KernelIndex& index) {
  Json kernels = Json::array();
  for (const auto& k : index.kernels) {
    kernels.push_back(Json{{"agent", k.agent},
                           {"operator", k.op},
                           {"file", k.file},
                           {"sha256", k.sha256},
                           {"s_i", k.s_i}});
  }
  return Json{{"schema", kKernelIndexSchema},
              {"sweep_id", index.sweep_id},
              {"backend", backend_name(index.backend)},
              {"kernels", std::move(kernels)}};
}

namespace {

Result<KernelIndexEntry> entry_from_json(const JsonField& f) {
  KernelIndexEntry e;
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(f));
  ATREX_TRY(r.required("agent", e.agent));
  ATREX_TRY(r.required("operator", e.op));
  ATREX_TRY(r.required("file", e.file));
  ATREX_TRY(r.required("sha256", e.sha256));
  ATREX_TRY(r.required("s_i", e.s_i));
  ATREX_TRY(r.finish());
  // The file is opened relative to the results folder: no way out of it.
  if (e.file.empty() || e.file.front() == '/' || e.file.find("..") != std::string::npos) {
    return f.fail("\"file\" must be a path inside the results folder");
  }
  return e;
}

}  // namespace

Result<KernelIndex> kernel_index_from_json(const Json& j, const std::string& source) {
  KernelIndex index;
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(JsonField(j, source)));
  ATREX_TRY(r.schema(kKernelIndexSchema));
  ATREX_TRY(r.required("sweep_id", index.sweep_id));
  ATREX_TRY(r.required("backend", index.backend));
  ATREX_TRY(r.required("kernels", index.kernels, [](const JsonField& f) -> Result<std::vector<KernelIndexEntry>> {
    ATREX_TRY(f.expect_array());
    std::vector<KernelIndexEntry> out;
    for (size_t i = 0; i < f.value().size(); ++i) {
      ATREX_ASSIGN_OR_RETURN(auto e, entry_from_json(f.element(i)));
      out.push_back(std::move(e));
    }
    return out;
  }));
  ATREX_TRY(r.finish());
  return index;
}

}  // namespace atrex
