// The entry of a sweep's manifest that says which atrex and which candidate compiler wrote into
// its results (wire/manifest.h BuildRecord; docs/results.md "Manifest").
#pragma once

#include <vector>

#include "atrex/common/wire/backend.h"
#include "atrex/common/wire/manifest.h"

namespace atrex::scheduler {

// This process's build (atrex::build_info) and the candidate compiler of `backend` on this host:
// the toolchain's program, the first line of its --version, the default arch
// (runner::default_arch) and its flags. Runs the compiler's --version once (tens of ms); never
// fails: an unavailable compiler is recorded as such.
BuildRecord current_build_record(Backend backend);

// Appends `b` unless the last entry is the same build (BuildRecord::same_build). True when
// appended.
bool record_build(std::vector<BuildRecord>& builds, BuildRecord b);

}  // namespace atrex::scheduler
