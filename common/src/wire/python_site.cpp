#include "atrex/common/wire/python_site.h"

#include "atrex/common/wire/reader.h"

namespace atrex {

Json to_json(const PythonSite& s) {
  return Json{{"schema", kPythonSiteSchema},
              {"interpreter", s.interpreter},
              {"version", s.version},
              {"version_hex", s.version_hex},
              {"libpython", s.libpython},
              {"home", s.home},
              {"sys_path", s.sys_path},
              {"torch", s.torch ? Json(*s.torch) : Json(nullptr)},
              {"triton", s.triton ? Json(*s.triton) : Json(nullptr)},
              {"module", s.module}};
}

Result<PythonSite> python_site_from_json(const Json& j, const std::string& source) {
  PythonSite s;
  ATREX_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::open(JsonField(j, source)));
  ATREX_TRY(r.schema(kPythonSiteSchema));
  ATREX_TRY(r.required("interpreter", s.interpreter));
  ATREX_TRY(r.required("version", s.version));
  ATREX_TRY(r.required("version_hex", s.version_hex));
  ATREX_TRY(r.required("libpython", s.libpython));
  ATREX_TRY(r.required("home", s.home));
  ATREX_TRY(r.required("sys_path", s.sys_path));
  ATREX_TRY(r.required("torch", s.torch));
  ATREX_TRY(r.required("triton", s.triton));
  ATREX_TRY(r.required("module", s.module));
  ATREX_TRY(r.finish());
  return s;
}

}  // namespace atrex
