// atrex.python-site/1 (common/include/atrex/common/wire/python_site.h): the Python site a
// python candidate's evaluation child loads (docs/python-candidates.md).
#include <gtest/gtest.h>

#include "atrex/common/wire/python_site.h"

namespace atrex {
namespace {

// atrex.python-site/1 (python_site.h): round trip, null torch/triton, and a strict read that
// names a missing and an unknown member.
TEST(Wire, PythonSiteRoundTripsAndIsStrict) {
  PythonSite s;
  s.interpreter = "/opt/torch/.venv/bin/python3";
  s.version = "3.12.3";
  s.version_hex = 0x030C03F0;
  s.libpython = "/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0";
  s.home = "/usr";
  s.sys_path = {"/usr/lib/python3.12", "/opt/torch/.venv/lib/python3.12/site-packages"};
  s.torch = "2.11.0+cu130";
  s.module = "generated_kernel.py";
  auto back = python_site_from_json(to_json(s), "site.json");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->sys_path, s.sys_path);
  EXPECT_EQ(back->torch, s.torch);
  EXPECT_FALSE(back->triton.has_value());
  Json missing = to_json(s);
  missing.erase("libpython");
  auto m = python_site_from_json(missing, "site.json");
  ASSERT_FALSE(m);
  EXPECT_NE(m.error().message.find("libpython"), std::string::npos) << m.error().message;
  Json extra = to_json(s);
  extra["pythonhome"] = "/";
  auto e = python_site_from_json(extra, "site.json");
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("pythonhome"), std::string::npos) << e.error().message;
}

}  // namespace
}  // namespace atrex
