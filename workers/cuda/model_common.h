#pragma once

// Pieces shared by the two CUDA model implementations (cuda_qwen35_model.cc,
// cuda_nemotron_h_model.cc). Host code.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "workers/cuda/cublas_library.h"
#include "workers/cuda/cuda_model.h"
#include "workers/cuda/cuda_status.h"
#include "workers/cuda/gemm.h"
#include "workers/model/model_shape.h"
#include "workers/model/nemotron_h_config.h"
#include "workers/model/qwen35_moe_config.h"
#include "workers/model/safetensors.h"

namespace tandem::workers::cuda {

// Longest run of tokens one forward pass takes: longer prefills go in chunks of this many.
inline constexpr int64_t kMaxPrefillChunk = 512;
// Most sequences one Decode call takes (the engine's largest bucket).
inline constexpr int64_t kMaxDecodeBatch = 256;
// Rows every activation scratch buffer holds.
inline constexpr int64_t kMaxRows =
    kMaxPrefillChunk > kMaxDecodeBatch ? kMaxPrefillChunk : kMaxDecodeBatch;
// cuBLAS workspace: set explicitly so cuBLAS never allocates inside a captured graph.
inline constexpr int64_t kCublasWorkspaceBytes = int64_t{32} << 20;
// Padding unit of the per-layer pieces of a state slot, in floats (256 bytes).
inline constexpr int64_t kStateAlignFloats = 64;

inline int64_t AlignFloats(int64_t n) {
  return (n + kStateAlignFloats - 1) / kStateAlignFloats * kStateAlignFloats;
}

// A cuBLAS handle with its own workspace, bound to a stream per call.
class CublasContext {
 public:
  CublasContext() = default;
  ~CublasContext() {
    if (handle_ != nullptr) lib_->destroy(handle_);
  }
  CublasContext(const CublasContext&) = delete;
  CublasContext& operator=(const CublasContext&) = delete;

  absl::Status Init() {
    absl::StatusOr<const CublasLibrary*> lib = CublasLibrary::Get();
    if (!lib.ok()) return lib.status();
    lib_ = *lib;
    if (absl::Status s = CublasStatus(lib_->create(&handle_), "cublasCreate"); !s.ok()) {
      handle_ = nullptr;
      return s;
    }
    return workspace_.Allocate(kCublasWorkspaceBytes, "the cuBLAS workspace");
  }
  // cublasSetStream resets the workspace to cuBLAS's own pool, so it is set again each time.
  absl::Status Bind(cudaStream_t stream) {
    if (absl::Status s = CublasStatus(lib_->set_stream(handle_, stream), "cublasSetStream");
        !s.ok()) {
      return s;
    }
    return CublasStatus(lib_->set_workspace(handle_, workspace_.as<void>(),
                                            static_cast<size_t>(kCublasWorkspaceBytes)),
                        "cublasSetWorkspace");
  }
  cublasHandle_t handle() const { return handle_; }

 private:
  const CublasLibrary* lib_ = nullptr;  // set by Init
  cublasHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
};

// The per-architecture loaders LoadCudaModel dispatches to.
absl::StatusOr<std::unique_ptr<CudaModel>> LoadCudaQwen35Moe(
    const model::Checkpoint& checkpoint, const model::qwen35::TextConfig& config,
    const model::ModelShape& shape);
absl::StatusOr<std::unique_ptr<CudaModel>> LoadCudaNemotronH(
    const model::Checkpoint& checkpoint, const model::nemotron_h::Config& config,
    const model::ModelShape& shape);

}  // namespace tandem::workers::cuda
