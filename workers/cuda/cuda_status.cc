#include "workers/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"
#include "workers/cuda/cublas_library.h"
#include "workers/cuda/launch_check.h"

namespace tandem::workers::cuda {
namespace {

absl::Status WithCode(cudaError_t err, std::string message) {
  if (err == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(std::move(message));
  return absl::InternalError(std::move(message));
}

std::string ErrorText(cudaError_t err) {
  return absl::StrCat(cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
}

}  // namespace

std::string CurrentDeviceText() {
  int device = -1;
  const cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) return absl::StrCat("device ", device);
  // Cleared so that the next launch check does not report this query's failure as its own.
  (void)cudaGetLastError();
  return absl::StrCat("no usable device (cudaGetDevice: ", cudaGetErrorName(err), ")");
}

absl::Status CudaStatus(cudaError_t err, absl::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  // Handled here: cleared so that the next launch check does not report it again as its own
  // (a sticky error, such as a kernel's illegal address, stays and is reported again anyway).
  (void)cudaGetLastError();
  std::string message = absl::StrCat(what, ": CUDA error ", ErrorText(err));
  if (LaunchFailure launch; TakeLaunchFailure(&launch)) {
    absl::StrAppend(&message, "; failed launch: ", DescribeLaunchFailure(launch));
  } else {
    absl::StrAppend(&message, " on ", CurrentDeviceText());
  }
  return WithCode(err, std::move(message));
}

absl::Status CublasStatus(cublasStatus_t err, absl::string_view what) {
  if (err == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  // A status can only come from a loaded library, but the names are looked up defensively.
  absl::StatusOr<const CublasLibrary*> lib = CublasLibrary::Get();
  const std::string name =
      lib.ok() ? absl::StrCat((*lib)->status_name(err), " (", (*lib)->status_string(err), ")")
               : absl::StrCat("status ", static_cast<int>(err));
  std::string message = absl::StrCat(what, ": cuBLAS error ", name, " on ", CurrentDeviceText());
  if (err == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(std::move(message));
  return absl::InternalError(std::move(message));
}

absl::Status DeviceAlloc(void** ptr, size_t bytes, absl::string_view what) {
  const cudaError_t err = cudaMalloc(ptr, bytes);
  if (err == cudaSuccess) return absl::OkStatus();
  *ptr = nullptr;
  // The failed call is the last error now; cleared so that the next launch is not blamed.
  (void)cudaGetLastError();
  return WithCode(err, absl::StrCat("cudaMalloc of ", bytes, " bytes for ", what, " on ",
                                    CurrentDeviceText(), ": ", ErrorText(err)));
}

absl::Status PinnedHostAlloc(void** ptr, size_t bytes, absl::string_view what) {
  const cudaError_t err = cudaMallocHost(ptr, bytes);
  if (err == cudaSuccess) return absl::OkStatus();
  *ptr = nullptr;
  (void)cudaGetLastError();
  return WithCode(err, absl::StrCat("cudaMallocHost of ", bytes, " pinned bytes for ", what,
                                    " (staging for ", CurrentDeviceText(), "): ", ErrorText(err)));
}

absl::Status TakeLaunchFailureStatus() {
  LaunchFailure launch;
  if (!TakeLaunchFailure(&launch)) return absl::OkStatus();
  return WithCode(launch.error, absl::StrCat("failed launch: ", DescribeLaunchFailure(launch)));
}

}  // namespace tandem::workers::cuda
