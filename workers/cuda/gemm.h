#pragma once

// Linear layers through cuBLAS and the device weight arena of the CUDA models. Host code.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "workers/cuda/cuda_kernels.h"
#include "workers/cuda/cuda_status.h"
#include "workers/model/safetensors.h"

namespace tandem::workers::cuda {

// out[n][rows] = x[n][cols] * W^T with W BF16 [rows][cols] as stored (HF Linear layout): x is
// cast to BF16 into x_scratch (n * cols elements), then one cublasGemmEx with BF16 inputs, fp32
// accumulation and fp32 output. Only launches (graph-capturable once the handle has a user
// workspace and is bound to `stream`).
absl::Status Linear(cublasHandle_t handle, const float* x, int64_t n, int64_t cols, const bf16* w,
                    int64_t rows, float* out, bf16* x_scratch, cudaStream_t stream);
// The same with x already in BF16 (several projections of one input share one cast). Runs on
// the stream the handle is bound to.
absl::Status LinearBf16(cublasHandle_t handle, const bf16* x, int64_t n, int64_t cols,
                        const bf16* w, int64_t rows, float* out);
// fp32 weights and input (the MoE routers: their top-k decisions are sensitive to rounding).
absl::Status LinearF32(cublasHandle_t handle, const float* x, int64_t n, int64_t cols,
                       const float* w, int64_t rows, float* out);

// Device copies of checkpoint tensors in one cudaMalloc. Add pieces first (each piece is rows of
// one or more tensors, concatenated without padding; pieces start 256-byte aligned), then
// Upload once; pointers are valid after Upload until destruction.
class DeviceWeights {
 public:
  // Rows [row_begin, row_begin + rows) of `view` seen as [shape[0]][elements / shape[0]].
  struct Rows {
    const model::TensorView* view = nullptr;
    int64_t row_begin = 0;
    int64_t rows = 0;
  };
  static Rows All(const model::TensorView* view);

  DeviceWeights() = default;
  ~DeviceWeights();
  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;

  // Returns the piece id. BF16 pieces are rounded to nearest even; F32 pieces go through
  // `transform` (e.g. A = -exp(A_log)) when given.
  int AddBf16(std::vector<Rows> parts);
  int AddF32(std::vector<Rows> parts, std::function<float(float)> transform = nullptr);
  // The whole checkpoint tensor `name`, checked against `shape`, as one piece.
  absl::StatusOr<int> LoadBf16(const model::Checkpoint& checkpoint, const std::string& name,
                               std::vector<int64_t> shape);
  absl::StatusOr<int> LoadF32(const model::Checkpoint& checkpoint, const std::string& name,
                              std::vector<int64_t> shape);

  absl::Status Upload();

  const bf16* bf16_ptr(int id) const;
  const float* f32_ptr(int id) const;
  int64_t bytes() const { return total_bytes_; }

 private:
  struct Piece {
    bool is_bf16 = true;
    std::vector<Rows> parts;
    std::function<float(float)> transform;
    int64_t elements = 0;
    int64_t offset = 0;  // bytes from base_
  };
  int Add(bool is_bf16, std::vector<Rows> parts, std::function<float(float)> transform);

  std::vector<Piece> pieces_;
  int64_t total_bytes_ = 0;
  uint8_t* base_ = nullptr;
};

// A cudaMalloc'd buffer freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  // Allocates `bytes` (at least 256, so every buffer is non-null), zeroed.
  absl::Status Allocate(int64_t bytes, const std::string& what);
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
};

}  // namespace tandem::workers::cuda
