// Logging (spdlog). Human-facing output of commands goes to stdout; logs go to stderr.
#pragma once

#include <string_view>

#include <spdlog/spdlog.h>

namespace atrex {

// Sets the global level from "trace|debug|info|warn|error|off"; unknown → info.
void configure_logging(std::string_view level);

}  // namespace atrex
