#pragma once

// Warp and block reductions shared by the kernel files (device code only).

namespace tandem::workers::cuda {

constexpr unsigned kFullWarp = 0xffffffffu;

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullWarp, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullWarp, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024). Every thread gets the result.
__device__ __forceinline__ float BlockSum(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = WarpSum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float r = lane < static_cast<int>(blockDim.x >> 5) ? partial[lane] : 0.0f;
    r = WarpSum(r);
    if (lane == 0) partial[0] = r;
  }
  __syncthreads();
  const float r = partial[0];
  __syncthreads();  // partial is reused by the next call
  return r;
}

}  // namespace tandem::workers::cuda
