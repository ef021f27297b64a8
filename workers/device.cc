#include "workers/device.h"

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

#ifdef TANDEM_HAVE_CUDA
#include "workers/cuda/cuda_probe.h"
#endif

namespace tandem::workers {
namespace {

// MemTotal and MemAvailable from /proc/meminfo, in bytes.
absl::Status ReadHostMemory(uint64_t* total, uint64_t* available) {
  std::ifstream in("/proc/meminfo");
  if (!in) return absl::UnavailableError("cannot read /proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemTotal:") *total = kib * 1024;
    if (key == "MemAvailable:") *available = kib * 1024;
  }
  return absl::OkStatus();
}

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "model name")) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      }
    }
  }
  return "cpu";
}

}  // namespace

bool BuiltWithCuda() {
#ifdef TANDEM_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

absl::StatusOr<DeviceDescription> OpenDevice(const std::string& spec) {
  DeviceDescription d;
  if (spec == "cpu") {
    d.id = "cpu";
    d.name = CpuModelName();
    if (absl::Status s = ReadHostMemory(&d.memory_total_bytes, &d.memory_free_bytes); !s.ok()) {
      return s;
    }
    return d;
  }
  int ordinal = -1;
  if (!absl::SimpleAtoi(spec, &ordinal) || ordinal < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device=", spec, ": expected 'cpu' or a CUDA device ordinal (0, 1, ...)"));
  }
#ifdef TANDEM_HAVE_CUDA
  char name[256] = {0};
  char error[512] = {0};
  if (cuda::OpenDevice(ordinal, name, sizeof(name), &d.memory_total_bytes, &d.memory_free_bytes,
                       error, sizeof(error)) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device=", spec, ": ", error, ". Use --device=cpu to run on the CPU."));
  }
  d.id = absl::StrCat("cuda:", ordinal);
  d.name = name;
  d.cuda_ordinal = ordinal;
  return d;
#else
  return absl::FailedPreconditionError(absl::StrCat(
      "--device=", spec,
      ": this tandem-worker was built without CUDA (nvcc was not found at configure time). "
      "Rebuild with the CUDA toolkit installed, or use --device=cpu."));
#endif
}

absl::StatusOr<DeviceDescription> NameDevice(const std::string& spec) {
  if (spec == "cpu") return OpenDevice(spec);
  int ordinal = -1;
  if (!absl::SimpleAtoi(spec, &ordinal) || ordinal < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device=", spec, ": expected 'cpu' or a CUDA device ordinal (0, 1, ...)"));
  }
  DeviceDescription d;
  d.id = absl::StrCat("cuda:", ordinal);
  d.name = "the engine's GPU (not opened by the worker)";
  d.engine_owned = true;
  return d;
}

absl::Status RefreshDeviceMemory(DeviceDescription* d) {
  if (d->engine_owned) return absl::OkStatus();
  if (d->cuda_ordinal < 0) return ReadHostMemory(&d->memory_total_bytes, &d->memory_free_bytes);
#ifdef TANDEM_HAVE_CUDA
  char error[512] = {0};
  if (cuda::MemoryInfo(d->cuda_ordinal, &d->memory_total_bytes, &d->memory_free_bytes, error,
                       sizeof(error)) != 0) {
    return absl::UnavailableError(error);
  }
#endif
  return absl::OkStatus();
}

}  // namespace tandem::workers
