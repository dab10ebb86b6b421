// GPU clocks, throttle reasons, temperature and power read through NVML, loaded at run time with
// dlopen("libnvidia-ml.so.1") so nothing links against the driver's library (a machine without
// it simply reports `{"available": false}`). Read-only: atrex never changes clocks or settings.
//
// Source: NVML API reference (nvmlDeviceGetClockInfo, nvmlDeviceGetCurrentClocksEventReasons,
// nvmlDeviceGetTemperature, nvmlDeviceGetPowerUsage), docs.nvidia.com/deploy/nvml-api.
#pragma once

#include <string>

#include "atrex/common/json_io.h"

namespace atrex::runner {

class NvmlClocks {
 public:
  // `pci_bus_id` as cudaDeviceGetPCIBusId writes it ("0000:1B:00.0"); NVML's device order can
  // differ from CUDA's, so the device is found by bus id.
  explicit NvmlClocks(const std::string& pci_bus_id);
  ~NvmlClocks();
  NvmlClocks(const NvmlClocks&) = delete;
  NvmlClocks& operator=(const NvmlClocks&) = delete;

  bool available() const { return device_ != nullptr; }
  // {"available", "sm_mhz", "mem_mhz", "sm_max_mhz", "temperature_c", "power_w",
  //  "throttle_reasons": hex mask, "throttle": ["sw_power_cap", ...]}; {"available": false,
  //  "error": ...} without NVML.
  Json sample() const;

 private:
  void* lib_ = nullptr;
  void* device_ = nullptr;
  std::string error_;
};

}  // namespace atrex::runner
