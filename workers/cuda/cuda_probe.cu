#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#include "workers/cuda/cuda_probe.h"

namespace tandem::workers::cuda {
namespace {

__global__ void ProbeKernel(unsigned int* out) { atomicAdd(out, 1u); }

int Fail(cudaError_t e, const char* what, char* error, size_t error_size) {
  std::snprintf(error, error_size, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
  return 1;
}

}  // namespace

int OpenDevice(int ordinal, char* name, size_t name_size, uint64_t* total_bytes,
               uint64_t* free_bytes, char* error, size_t error_size) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess)
    return Fail(e, "cannot query CUDA devices (is the driver installed?)", error, error_size);
  if (ordinal < 0 || ordinal >= count) {
    std::snprintf(error, error_size, "CUDA device %d does not exist: %d device(s) visible", ordinal,
                  count);
    return 1;
  }
  if ((e = cudaSetDevice(ordinal)) != cudaSuccess)
    return Fail(e, "cudaSetDevice", error, error_size);
  cudaDeviceProp prop;
  if ((e = cudaGetDeviceProperties(&prop, ordinal)) != cudaSuccess) {
    return Fail(e, "cudaGetDeviceProperties", error, error_size);
  }
  std::snprintf(name, name_size, "%s", prop.name);
  // The first allocation creates the context; the kernel proves the device runs code.
  unsigned int* d = nullptr;
  if ((e = cudaMalloc(&d, sizeof(unsigned int))) != cudaSuccess)
    return Fail(e, "cudaMalloc", error, error_size);
  cudaMemset(d, 0, sizeof(unsigned int));
  ProbeKernel<<<1, 32>>>(d);
  unsigned int h = 0;
  e = cudaMemcpy(&h, d, sizeof(h), cudaMemcpyDeviceToHost);
  cudaFree(d);
  if (e != cudaSuccess) return Fail(e, "probe kernel", error, error_size);
  if (h != 32) {
    std::snprintf(error, error_size, "probe kernel returned %u, expected 32", h);
    return 1;
  }
  return MemoryInfo(ordinal, total_bytes, free_bytes, error, error_size);
}

int MemoryInfo(int ordinal, uint64_t* total_bytes, uint64_t* free_bytes, char* error,
               size_t error_size) {
  cudaError_t e = cudaSetDevice(ordinal);
  if (e != cudaSuccess) return Fail(e, "cudaSetDevice", error, error_size);
  size_t free_b = 0, total_b = 0;
  if ((e = cudaMemGetInfo(&free_b, &total_b)) != cudaSuccess)
    return Fail(e, "cudaMemGetInfo", error, error_size);
  *total_bytes = total_b;
  *free_bytes = free_b;
  return 0;
}

}  // namespace tandem::workers::cuda
