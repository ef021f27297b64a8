#pragma once

#include <cmath>
#include <cstdint>

namespace tandem::workers::native {

// Dense fp32 kernels of the CPU reference engine. Row-major throughout. The matrix products go
// to OpenBLAS (multithreaded, vectorized); the rest are simple loops the compiler vectorizes.

// out[n][rows] = x[n][cols] * w[rows][cols]^T (a linear layer: weights as stored in HF
// checkpoints, [out_features, in_features]). `accumulate` adds to out instead of overwriting.
void Linear(const float* x, int64_t n, int64_t cols, const float* w, int64_t rows, float* out,
            bool accumulate = false);

// RMSNorm of each of `n` rows of `dim`: x * rsqrt(mean(x^2) + eps) * (weight or 1 + weight).
// In place when out == x.
void RmsNorm(const float* x, int64_t n, int64_t dim, const float* weight, float eps,
             bool one_plus_weight, float* out);

// Numerically stable softmax of `n` values, in place.
void Softmax(float* x, int64_t n);

inline float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float Silu(float x) { return x / (1.0f + std::exp(-x)); }
// softplus as torch computes it (threshold 20: linear above).
inline float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// Sets the threads OpenBLAS uses (0: its default, all cores).
void SetKernelThreads(int threads);

}  // namespace tandem::workers::native
