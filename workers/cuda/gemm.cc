#include "workers/cuda/gemm.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "workers/cuda/cublas_library.h"
#include "workers/cuda/random_fill.h"
#include "workers/model/checkpoint_writer.h"

namespace tandem::workers::cuda {
namespace {

constexpr int64_t kAlign = 256;  // bytes: every piece and buffer starts on this boundary

int64_t AlignUp(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Elements per row when the tensor is seen as [shape[0]][rest].
int64_t RowElements(const model::TensorView& v) {
  return v.shape.empty() || v.shape[0] == 0 ? v.elements() : v.elements() / v.shape[0];
}
int64_t RowCount(const model::TensorView& v) { return v.shape.empty() ? 1 : v.shape[0]; }

// A failed GEMM names its shape: a bad dimension or an unsupported type pair reads as such.
absl::Status GemmStatus(cublasStatus_t err, const char* kind, int64_t n, int64_t cols,
                        int64_t rows) {
  if (err == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return CublasStatus(err, absl::StrCat("cublasGemmEx (", kind, " linear: ", n, " x ", cols,
                                        " input, ", rows, " x ", cols, " weight)"));
}

// out[n][rows] = x[n][cols] * W^T, x and W of `type`, fp32 out. Row-major out[n][rows] is
// column-major out^T [rows][n] = W (col-major view [cols][rows], transposed) times x^T
// (col-major [cols][n]).
absl::Status Gemm(cublasHandle_t handle, const void* x, int64_t n, int64_t cols, const void* w,
                  int64_t rows, float* out, cudaDataType_t type, cublasComputeType_t compute,
                  const char* kind) {
  if (n <= 0) return absl::OkStatus();
  // Loaded already: the handle came from it.
  absl::StatusOr<const CublasLibrary*> lib = CublasLibrary::Get();
  if (!lib.ok()) return lib.status();
  const float alpha = 1.0f, beta = 0.0f;
  return GemmStatus(
      (*lib)->gemm_ex(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), static_cast<int>(n),
                      static_cast<int>(cols), &alpha, w, type, static_cast<int>(cols), x, type,
                      static_cast<int>(cols), &beta, out, CUDA_R_32F, static_cast<int>(rows),
                      compute, CUBLAS_GEMM_DEFAULT),
      kind, n, cols, rows);
}

}  // namespace

absl::Status LinearBf16(cublasHandle_t handle, const bf16* x, int64_t n, int64_t cols,
                        const bf16* w, int64_t rows, float* out) {
  return Gemm(handle, x, n, cols, w, rows, out, CUDA_R_16BF, CUBLAS_COMPUTE_32F, "bf16");
}

absl::Status Linear(cublasHandle_t handle, const float* x, int64_t n, int64_t cols, const bf16* w,
                    int64_t rows, float* out, bf16* x_scratch, cudaStream_t stream) {
  if (n <= 0) return absl::OkStatus();
  if (absl::Status s = CudaStatus(CastToBf16(x, n * cols, x_scratch, stream), "CastToBf16");
      !s.ok()) {
    return s;
  }
  return LinearBf16(handle, x_scratch, n, cols, w, rows, out);
}

absl::Status LinearF32(cublasHandle_t handle, const float* x, int64_t n, int64_t cols,
                       const float* w, int64_t rows, float* out) {
  return Gemm(handle, x, n, cols, w, rows, out, CUDA_R_32F, CUBLAS_COMPUTE_32F_PEDANTIC, "fp32");
}

DeviceWeights::Rows DeviceWeights::All(const model::TensorView* view) {
  return Rows{.view = view, .row_begin = 0, .rows = RowCount(*view)};
}

DeviceWeights::~DeviceWeights() {
  if (base_ != nullptr) cudaFree(base_);
}

int DeviceWeights::Add(bool is_bf16, std::vector<Rows> parts,
                       std::function<float(float)> transform) {
  Piece p;
  p.is_bf16 = is_bf16;
  for (const Rows& r : parts) p.elements += r.rows * RowElements(*r.view);
  p.parts = std::move(parts);
  p.transform = std::move(transform);
  p.offset = total_bytes_;
  total_bytes_ += AlignUp(p.elements * (is_bf16 ? 2 : 4));
  pieces_.push_back(std::move(p));
  return static_cast<int>(pieces_.size()) - 1;
}

int DeviceWeights::AddBf16(std::vector<Rows> parts) {
  return Add(/*is_bf16=*/true, std::move(parts), nullptr);
}

int DeviceWeights::AddF32(std::vector<Rows> parts, std::function<float(float)> transform) {
  return Add(/*is_bf16=*/false, std::move(parts), std::move(transform));
}

absl::StatusOr<int> DeviceWeights::LoadBf16(const model::Checkpoint& checkpoint,
                                            const std::string& name, std::vector<int64_t> shape) {
  absl::StatusOr<const model::TensorView*> t = checkpoint.Get(name, shape);
  if (!t.ok()) return t.status();
  return AddBf16({All(*t)});
}

absl::StatusOr<int> DeviceWeights::LoadF32(const model::Checkpoint& checkpoint,
                                           const std::string& name, std::vector<int64_t> shape) {
  absl::StatusOr<const model::TensorView*> t = checkpoint.Get(name, shape);
  if (!t.ok()) return t.status();
  return AddF32({All(*t)});
}

absl::Status DeviceWeights::Upload() {
  if (base_ != nullptr) return absl::FailedPreconditionError("DeviceWeights: uploaded twice");
  void* base = nullptr;
  if (absl::Status s =
          DeviceAlloc(&base, static_cast<size_t>(total_bytes_ > 0 ? total_bytes_ : kAlign),
                      "the model weights");
      !s.ok()) {
    return s;
  }
  base_ = static_cast<uint8_t*>(base);
  // One host staging buffer per piece (bounded by the largest tensor), copied synchronously.
  std::vector<uint8_t> staging;
  bool filled = false;
  for (const Piece& p : pieces_) {
    // Generated weights (--random_weights) are filled on the device, never staged on the host;
    // only a piece with a host transform (Nemotron's A = -exp(A_log), [heads]) is staged.
    if (p.transform == nullptr && std::all_of(p.parts.begin(), p.parts.end(), [](const Rows& r) {
          return r.view->random.has_value();
        })) {
      int64_t at = 0;  // elements written
      for (const Rows& r : p.parts) {
        const int64_t row = RowElements(*r.view);
        const int64_t first = r.row_begin * row, count = r.rows * row;
        const cudaError_t err =
            p.is_bf16 ? FillRandomBf16(*r.view->random, first, count,
                                       reinterpret_cast<bf16*>(base_ + p.offset) + at, nullptr)
                      : FillRandomF32(*r.view->random, first, count,
                                      reinterpret_cast<float*>(base_ + p.offset) + at, nullptr);
        if (absl::Status s = CudaStatus(err, "FillRandom (generated weights)"); !s.ok()) return s;
        at += count;
      }
      filled = true;
      continue;
    }
    const int64_t elem_bytes = p.is_bf16 ? 2 : 4;
    staging.resize(static_cast<size_t>(p.elements * elem_bytes));
    int64_t at = 0;  // elements written
    for (const Rows& r : p.parts) {
      const model::TensorView& v = *r.view;
      const int64_t row = RowElements(v);
      const int64_t first = r.row_begin * row, count = r.rows * row;
      if (p.is_bf16 && v.dtype == model::DType::kBF16 && v.data != nullptr) {
        std::memcpy(staging.data() + at * 2, v.data + first * 2, static_cast<size_t>(count * 2));
      } else if (p.is_bf16) {
        bf16* out = reinterpret_cast<bf16*>(staging.data()) + at;
        for (int64_t i = 0; i < count; ++i) out[i] = model::FloatToBf16(v.Element(first + i));
      } else {
        float* out = reinterpret_cast<float*>(staging.data()) + at;
        for (int64_t i = 0; i < count; ++i) {
          const float f = v.Element(first + i);
          out[i] = p.transform ? p.transform(f) : f;
        }
      }
      at += count;
    }
    if (absl::Status s = CudaStatus(
            cudaMemcpy(base_ + p.offset, staging.data(), staging.size(), cudaMemcpyHostToDevice),
            "cudaMemcpy (model weights)");
        !s.ok()) {
      return s;
    }
  }
  // The fills ran on the legacy default stream; the models' streams are non-blocking.
  if (filled) return CudaStatus(cudaDeviceSynchronize(), "FillRandom (generated weights)");
  return absl::OkStatus();
}

const bf16* DeviceWeights::bf16_ptr(int id) const {
  return reinterpret_cast<const bf16*>(base_ + pieces_[id].offset);
}

const float* DeviceWeights::f32_ptr(int id) const {
  return reinterpret_cast<const float*>(base_ + pieces_[id].offset);
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

absl::Status DeviceBuffer::Allocate(int64_t bytes, const std::string& what) {
  if (ptr_ != nullptr) {
    cudaFree(ptr_);
    ptr_ = nullptr;
  }
  const int64_t size = AlignUp(bytes > 0 ? bytes : kAlign);
  if (absl::Status s = DeviceAlloc(&ptr_, static_cast<size_t>(size), what); !s.ok()) return s;
  return CudaStatus(cudaMemset(ptr_, 0, static_cast<size_t>(size)),
                    absl::StrCat("cudaMemset of ", size, " bytes for ", what));
}

}  // namespace tandem::workers::cuda
