// This host's name (gethostname(2)), "" when it has none: where the local launcher's workers run
// and where a manifest's build entry was written.
#pragma once

#include <unistd.h>

#include <string>

namespace atrex::scheduler {

inline std::string host_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

}  // namespace atrex::scheduler
