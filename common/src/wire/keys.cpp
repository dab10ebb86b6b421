#include "atrex/common/wire/keys.h"

#include <fmt/format.h>

namespace atrex {

std::string record_key(std::string_view task_id, std::string_view shape_id) {
  return fmt::format("{}/{}", task_id, shape_id);
}

std::string final_key(std::string_view agent, std::string_view op) {
  return fmt::format("final/{}/{}", agent, op);
}

std::string sweep_prefix(std::string_view sweep_id) {
  return fmt::format("atrex:{{{}}}", sweep_id);
}

std::string manifest_key(std::string_view sweep_id) { return sweep_prefix(sweep_id) + ":manifest"; }

}  // namespace atrex
