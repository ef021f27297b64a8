#pragma once

// The device scratch buffers of a CUDA model, allocated once at load. Host code.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "workers/cuda/gemm.h"

namespace tandem::workers::cuda {

// Owns the buffers; the first failed allocation is kept, and later ones are skipped.
class ScratchBuffers {
 public:
  // Points *out at a new zeroed buffer of `count` Ts; `what` names it in an allocation error.
  template <typename T>
  void Allocate(T** out, int64_t count, const char* what) {
    if (!status_.ok()) return;
    buffers_.push_back(std::make_unique<DeviceBuffer>());
    status_ = buffers_.back()->Allocate(count * static_cast<int64_t>(sizeof(T)), what);
    *out = buffers_.back()->as<T>();
  }
  const absl::Status& status() const { return status_; }

 private:
  std::vector<std::unique_ptr<DeviceBuffer>> buffers_;
  absl::Status status_;
};

}  // namespace tandem::workers::cuda
