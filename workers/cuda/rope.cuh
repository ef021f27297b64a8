#pragma once

// Rotary position embedding arithmetic shared by the kernel files (device code only): the text
// RoPE (kernels_basic.cu) and the vision encoder's 2-D RoPE (kernels_vision.cu) compute their
// angles alike, so equal positions give equal bits.

#include <cstdint>

namespace tandem::workers::cuda {

// sin and cos of position * inv_freq, inv_freq = 1 / theta^(2 pair / dim), as the CPU reference
// computes them in fp32 (exponent rounded to fp32, pow rounded to fp32); the pow and the sin/cos
// are evaluated in double and rounded, which reproduces the correctly rounded fp32 results of
// the host's libm.
__device__ __forceinline__ void RopeSinCos(float theta, int64_t pair, int64_t dim, int32_t position,
                                           float* sn, float* cs) {
  const float exponent = static_cast<float>(2 * pair) / static_cast<float>(dim);
  const float p =
      static_cast<float>(pow(static_cast<double>(theta), static_cast<double>(exponent)));
  const float inv_freq = 1.0f / p;
  const float angle = static_cast<float>(position) * inv_freq;
  double s, c;
  sincos(static_cast<double>(angle), &s, &c);
  *sn = static_cast<float>(s);
  *cs = static_cast<float>(c);
}

// Rotates pair (i, i + half) of the head at v by the angle whose sin and cos are sn and cs.
__device__ __forceinline__ void RotatePairBy(float* v, int64_t i, int64_t half, float sn,
                                             float cs) {
  const float x1 = v[i], x2 = v[i + half];
  v[i] = x1 * cs - x2 * sn;
  v[i + half] = x2 * cs + x1 * sn;
}

}  // namespace tandem::workers::cuda
