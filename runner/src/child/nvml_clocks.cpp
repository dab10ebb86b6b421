#include "nvml_clocks.h"

#include <dlfcn.h>

#include <utility>
#include <vector>

#include <fmt/format.h>

namespace atrex::runner {
namespace {

// The few NVML entry points used, declared from the NVML API reference (nvml.h is not needed).
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
constexpr int kNvmlClockSm = 1, kNvmlClockMem = 2, kNvmlTemperatureGpu = 0;
using InitFn = nvmlReturn_t (*)();
using ByBusIdFn = nvmlReturn_t (*)(const char*, nvmlDevice_t*);
using ClockFn = nvmlReturn_t (*)(nvmlDevice_t, int, unsigned*);
using ReasonsFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned long long*);
using TempFn = nvmlReturn_t (*)(nvmlDevice_t, int, unsigned*);
using PowerFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned*);

template <typename Fn>
Fn symbol(void* lib, const char* name) {
  return lib ? reinterpret_cast<Fn>(::dlsym(lib, name)) : nullptr;
}

// nvmlClocksEventReason* bits (NVML API reference).
const std::vector<std::pair<unsigned long long, const char*>>& reason_names() {
  static const std::vector<std::pair<unsigned long long, const char*>> names = {
      {0x1, "gpu_idle"},
      {0x2, "applications_clocks_setting"},
      {0x4, "sw_power_cap"},
      {0x8, "hw_slowdown"},
      {0x10, "sync_boost"},
      {0x20, "sw_thermal_slowdown"},
      {0x40, "hw_thermal_slowdown"},
      {0x80, "hw_power_brake_slowdown"},
      {0x100, "display_clock_setting"}};
  return names;
}

}  // namespace

NvmlClocks::NvmlClocks(const std::string& pci_bus_id) {
  lib_ = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib_) {
    error_ = "libnvidia-ml.so.1 not found";
    return;
  }
  auto init = symbol<InitFn>(lib_, "nvmlInit_v2");
  auto by_bus = symbol<ByBusIdFn>(lib_, "nvmlDeviceGetHandleByPciBusId_v2");
  if (!init || !by_bus) {
    error_ = "NVML lacks nvmlInit_v2/nvmlDeviceGetHandleByPciBusId_v2";
    return;
  }
  if (int rc = init(); rc != 0) {
    error_ = fmt::format("nvmlInit_v2 returned {}", rc);
    return;
  }
  nvmlDevice_t dev = nullptr;
  if (int rc = by_bus(pci_bus_id.c_str(), &dev); rc != 0) {
    error_ = fmt::format("nvmlDeviceGetHandleByPciBusId_v2({}) returned {}", pci_bus_id, rc);
    return;
  }
  device_ = dev;
}

NvmlClocks::~NvmlClocks() {
  if (lib_) {
    if (auto shutdown = symbol<InitFn>(lib_, "nvmlShutdown"); shutdown && device_) shutdown();
    ::dlclose(lib_);
  }
}

Json NvmlClocks::sample() const {
  if (!device_) return Json{{"available", false}, {"error", error_}};
  Json j{{"available", true}};
  unsigned v = 0;
  if (auto clock = symbol<ClockFn>(lib_, "nvmlDeviceGetClockInfo")) {
    if (clock(device_, kNvmlClockSm, &v) == 0) j["sm_mhz"] = v;
    if (clock(device_, kNvmlClockMem, &v) == 0) j["mem_mhz"] = v;
  }
  if (auto max_clock = symbol<ClockFn>(lib_, "nvmlDeviceGetMaxClockInfo");
      max_clock && max_clock(device_, kNvmlClockSm, &v) == 0) {
    j["sm_max_mhz"] = v;
  }
  if (auto temp = symbol<TempFn>(lib_, "nvmlDeviceGetTemperature");
      temp && temp(device_, kNvmlTemperatureGpu, &v) == 0) {
    j["temperature_c"] = v;
  }
  if (auto power = symbol<PowerFn>(lib_, "nvmlDeviceGetPowerUsage");
      power && power(device_, &v) == 0) {
    j["power_w"] = v / 1000.0;
  }
  auto reasons = symbol<ReasonsFn>(lib_, "nvmlDeviceGetCurrentClocksEventReasons");
  if (!reasons) reasons = symbol<ReasonsFn>(lib_, "nvmlDeviceGetCurrentClocksThrottleReasons");
  unsigned long long mask = 0;
  if (reasons && reasons(device_, &mask) == 0) {
    j["throttle_reasons"] = fmt::format("{:#x}", mask);
    Json names = Json::array();
    for (const auto& [bit, name] : reason_names()) {
      if (mask & bit) names.push_back(name);
    }
    j["throttle"] = names;
  }
  return j;
}

}  // namespace atrex::runner
