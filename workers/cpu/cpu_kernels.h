#pragma once

#include <cmath>
#include <cstdint>

namespace tandem::workers::cpu {

// Dense fp32 kernels of the CPU reference engine. Row-major throughout. The matrix products go
// to OpenBLAS's vectorized single-threaded build, split across our own thread pool; the rest
// are simple loops the compiler vectorizes.

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

// Sets the threads the matrix products use (0 keeps the default: one per core).
void SetKernelThreads(int threads);

// General strided product for views into larger buffers (e.g. one head of a KV cache):
// out[m][n] = a[m][k] * B, where B = b[n][k]^T when b_transposed (b rows of k, like Linear's
// weights) else b[k][n]. lda, ldb and ldc are row strides in elements. `accumulate` adds.
void MatMul(const float* a, int64_t lda, const float* b, int64_t ldb, bool b_transposed, int64_t m,
            int64_t n, int64_t k, float* out, int64_t ldc, bool accumulate = false);

}  // namespace tandem::workers::cpu
