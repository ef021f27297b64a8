// tandem-kit-probe: the GPU kit's first step. Prints one JSON line with what the CUDA runtime
// sees (device 0's name, memory, compute capability; driver and runtime versions), or with
// "error" when there is no usable device. Exit status 0 with a device, 3 without one, so the kit
// can tell "no GPU here" from a failure.
#include <cuda_runtime.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

int main() {
  nlohmann::json out;
  int runtime = 0, driver = 0, count = 0;
  cudaRuntimeGetVersion(&runtime);
  // 0 when no driver is installed.
  cudaDriverGetVersion(&driver);
  out["runtime_version"] = runtime;
  out["driver_version"] = driver;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    out["devices"] = 0;
    out["error"] = e != cudaSuccess
                       ? std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e)
                       : "the runtime reports 0 devices";
    std::printf("%s\n", out.dump().c_str());
    return 3;
  }
  out["devices"] = count;
  cudaDeviceProp prop{};
  size_t free = 0, total = 0;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || cudaSetDevice(0) != cudaSuccess ||
      cudaMemGetInfo(&free, &total) != cudaSuccess) {
    const cudaError_t last = cudaGetLastError();
    out["error"] = std::string("device 0 unusable: ") + cudaGetErrorString(last);
    std::printf("%s\n", out.dump().c_str());
    return 3;
  }
  out["name"] = prop.name;
  out["compute_capability"] = std::to_string(prop.major) + "." + std::to_string(prop.minor);
  out["memory_total_bytes"] = total;
  out["memory_free_bytes"] = free;
  out["multiprocessors"] = prop.multiProcessorCount;
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
