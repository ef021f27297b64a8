#pragma once

// C interface to the CUDA runtime, compiled by nvcc only when CUDA is enabled. Kept free of
// project headers so nvcc sees nothing but the CUDA runtime.

#include <cstddef>
#include <cstdint>

namespace tandem::workers::cuda {

// Makes `ordinal` the current device, creates its context and runs a probe kernel. Returns 0 on
// success; otherwise writes a message to `error` and returns nonzero.
int OpenDevice(int ordinal, char* name, size_t name_size, uint64_t* total_bytes,
               uint64_t* free_bytes, char* error, size_t error_size);

int MemoryInfo(int ordinal, uint64_t* total_bytes, uint64_t* free_bytes, char* error,
               size_t error_size);

}  // namespace tandem::workers::cuda
