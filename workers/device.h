#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tandem::workers {

// The accelerator a worker process owns (or the CPU, when asked for explicitly).
struct DeviceDescription {
  // "cpu" or "cuda:N".
  std::string id;
  std::string name;
  uint64_t memory_total_bytes = 0;
  uint64_t memory_free_bytes = 0;
  // -1 for the CPU, and for a GPU only named (NameDevice).
  int cuda_ordinal = -1;
  // A GPU that an engine server in front of which the worker runs owns: never opened by this
  // process, so no memory figures.
  bool engine_owned = false;
};

// Opens the device named by --device: "cpu", or a CUDA ordinal "N". For a GPU this creates the
// process's CUDA context on device N and runs a probe kernel; a missing driver, an ordinal out
// of range, an unusable device or a build without CUDA is an error that says which. Never falls
// back to the CPU.
absl::StatusOr<DeviceDescription> OpenDevice(const std::string& spec);

// For --engine=upstream: the device the engine server uses, named but not opened. A CUDA context
// of the worker's own on the engine's GPU would take its memory (hundreds of MiB) and, in the
// exclusive-process compute mode, keep the engine from starting. "cpu" is as OpenDevice.
absl::StatusOr<DeviceDescription> NameDevice(const std::string& spec);

// Re-reads free memory (none for an engine-owned GPU).
absl::Status RefreshDeviceMemory(DeviceDescription* device);

// True when this binary was built with the CUDA device path.
bool BuiltWithCuda();

}  // namespace tandem::workers
