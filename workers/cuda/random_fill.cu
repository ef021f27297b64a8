// Device fill of generated weights: one counter-based draw per element (random_weights.h), so
// every thread is independent and the result does not depend on the launch shape.

#include "workers/cuda/launch_check.h"
#include "workers/cuda/random_fill.h"

namespace tandem::workers::cuda {
namespace {

constexpr int kThreads = 256;
// Enough blocks to fill an H200 several times over; each thread strides over the rest.
constexpr int64_t kMaxBlocks = 8192;

template <typename T>
__global__ void FillRandomKernel(model::RandomFill fill, int64_t first, int64_t count, T* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    if constexpr (sizeof(T) == 2) {
      out[i] = model::RandomWeightBf16(fill, first + i);
    } else {
      out[i] = model::RandomWeight(fill, first + i);
    }
  }
}

template <typename T>
cudaError_t Launch(const model::RandomFill& fill, int64_t first, int64_t count, T* out,
                   cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  if (first < 0 || out == nullptr) return cudaErrorInvalidValue;
  int64_t blocks = (count + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  FillRandomKernel<T>
      <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(fill, first, count, out);
  return CheckLaunch("FillRandomKernel", dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0);
}

}  // namespace

cudaError_t FillRandomBf16(const model::RandomFill& fill, int64_t first, int64_t count,
                           uint16_t* out, cudaStream_t stream) {
  return Launch(fill, first, count, out, stream);
}

cudaError_t FillRandomF32(const model::RandomFill& fill, int64_t first, int64_t count, float* out,
                          cudaStream_t stream) {
  return Launch(fill, first, count, out, stream);
}

}  // namespace tandem::workers::cuda
