#include "atrex/common/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace atrex {

void configure_logging(std::string_view level) {
  auto logger = spdlog::stderr_color_mt("atrex");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  spdlog::level::level_enum lvl = spdlog::level::from_str(std::string(level));
  if (lvl == spdlog::level::off && level != "off") lvl = spdlog::level::info;
  spdlog::set_level(lvl);
}

}  // namespace atrex
