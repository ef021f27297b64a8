#pragma once

// CUDA runtime and cuBLAS errors as absl::Status, for the host code of the CUDA models and
// engine. Every message names the device, and allocations name their size, so that "out of
// memory" or a missing driver reads as what it is at the engine boundary rather than as a later
// crash. Failed kernel launches carry the kernel and its launch shape (launch_check.h).

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tandem::workers::cuda {

// "device 0", or "no usable device (cudaGetDevice: cudaErrorInsufficientDriver)" when even the
// current device cannot be read (no driver, or the device was lost).
std::string CurrentDeviceText();

// `what`: the call or its purpose. RESOURCE_EXHAUSTED for out-of-memory, INTERNAL otherwise. A
// launch failure pending on this thread is attached (and taken), with its kernel name and shape.
absl::Status CudaStatus(cudaError_t err, absl::string_view what);
absl::Status CublasStatus(cublasStatus_t err, absl::string_view what);

// cudaMalloc / cudaMallocHost (pinned) of `bytes` for `what`; on failure *ptr is null and the
// Status names the device, the size and `what`.
absl::Status DeviceAlloc(void** ptr, size_t bytes, absl::string_view what);
absl::Status PinnedHostAlloc(void** ptr, size_t bytes, absl::string_view what);

// The launch failure pending on this thread as a Status (OK when there is none), taking it.
// Engines check it at the end of a step: a launch whose returned error was dropped somewhere
// still ends the step with its kernel's name, without a synchronization per launch.
absl::Status TakeLaunchFailureStatus();

namespace internal {
// TANDEM_CUDA_RETURN's message: the caller's description when given, else the expression.
inline absl::string_view CudaWhat(absl::string_view expr) { return expr; }
inline absl::string_view CudaWhat(absl::string_view, absl::string_view what) { return what; }
}  // namespace internal

}  // namespace tandem::workers::cuda

// Returns the Status of a failed cudaError_t expression from the enclosing function, described
// by the optional second argument or else by the expression's text:
//   TANDEM_CUDA_RETURN(RmsNorm(x, rows, dim, w, eps, true, out, stream));
//   TANDEM_CUDA_RETURN(cudaStreamSynchronize(stream_), "decode step");
#define TANDEM_CUDA_RETURN(expr, ...)                                                       \
  do {                                                                                      \
    if (::absl::Status tandem_cuda_status_ = ::tandem::workers::cuda::CudaStatus(           \
            (expr),                                                                         \
            ::tandem::workers::cuda::internal::CudaWhat(#expr __VA_OPT__(, ) __VA_ARGS__)); \
        !tandem_cuda_status_.ok()) {                                                        \
      return tandem_cuda_status_;                                                           \
    }                                                                                       \
  } while (0)
