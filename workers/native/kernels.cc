#include "workers/native/kernels.h"

#include <cblas.h>

#include <algorithm>

namespace tandem::workers::native {

void Linear(const float* x, int64_t n, int64_t cols, const float* w, int64_t rows, float* out,
            bool accumulate) {
  if (n == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(rows), static_cast<int>(cols), 1.0f,
                w, static_cast<int>(cols), x, 1, accumulate ? 1.0f : 0.0f, out, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n),
              static_cast<int>(rows), static_cast<int>(cols), 1.0f, x, static_cast<int>(cols), w,
              static_cast<int>(cols), accumulate ? 1.0f : 0.0f, out, static_cast<int>(rows));
}

void RmsNorm(const float* x, int64_t n, int64_t dim, const float* weight, float eps,
             bool one_plus_weight, float* out) {
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * dim;
    float* o = out + r * dim;
    float ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) {
      const float w = weight == nullptr ? 1.0f : (one_plus_weight ? 1.0f + weight[i] : weight[i]);
      o[i] = xr[i] * inv * w;
    }
  }
}

void Softmax(float* x, int64_t n) {
  const float m = *std::max_element(x, x + n);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  for (int64_t i = 0; i < n; ++i) x[i] /= sum;
}

void SetKernelThreads(int threads) {
  if (threads > 0) openblas_set_num_threads(threads);
}

}  // namespace tandem::workers::native
