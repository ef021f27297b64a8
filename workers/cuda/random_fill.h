#pragma once

// The device side of --random_weights: fills generated tensors (model/random_weights.h) in
// device memory, so a full-size model (~70 GB BF16) never passes through host memory. Plain C++
// declarations; the kernels live in random_fill.cu.

#include <cuda_runtime.h>

#include <cstdint>

#include "workers/model/random_weights.h"

namespace tandem::workers::cuda {

// out[i] = RandomWeight(fill, first + i) for i in [0, count): as BF16 bit patterns, or as fp32.
// Bit for bit what the host computes. Only enqueues on `stream`; returns the launch error.
cudaError_t FillRandomBf16(const model::RandomFill& fill, int64_t first, int64_t count,
                           uint16_t* out, cudaStream_t stream);
cudaError_t FillRandomF32(const model::RandomFill& fill, int64_t first, int64_t count, float* out,
                          cudaStream_t stream);

}  // namespace tandem::workers::cuda
