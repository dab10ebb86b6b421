// Sweep resolution: a sweep file on this machine becomes the manifest of what will run — the
// suite, the backend, the hardware profile, each operator's shapes — and its sweep id, a hash
// of everything that determines results (a changed sweep never reuses a results folder).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "atrex/common/wire/manifest.h"
#include "atrex/problems/hardware.h"
#include "atrex/problems/suite.h"
#include "atrex/scheduler/sweep_spec.h"

namespace atrex::scheduler {

struct SweepOverrides {
  std::optional<BackendChoice> backend;
  std::optional<std::string> hardware;
  std::optional<std::filesystem::path> output;
  std::optional<std::filesystem::path> suite_dir;
  // The runners run on other machines (cluster launchers): the backend is not checked against
  // this machine's devices, and `hardware: auto` needs a GPU here or an explicit profile.
  bool remote_runners = false;
};

struct ResolvedSweep {
  SweepSpec spec;
  problems::Suite suite;
  problems::HardwareProfile hardware;
  Manifest manifest;  // the resolved sweep (lifecycle fields unset), with its sweep_id
  const std::string& sweep_id() const { return manifest.sweep_id; }
  const std::filesystem::path output() const { return manifest.output; }
};

// Loads the suite and hardware, detects the backend, applies the shape rules. Errors: unknown
// operator/profile/backend (kNotFound/kInvalidInput, naming the file and field); kUnavailable
// for a GPU backend without a GPU here (unless remote_runners).
Result<ResolvedSweep> resolve_sweep(const SweepSpec& spec, const SweepOverrides& overrides);

}  // namespace atrex::scheduler
