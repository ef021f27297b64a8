#pragma once

// Checks of kernel launches, shared by the kernels_*.cu launchers (compiled by nvcc, so plain
// C++ here: no absl) and the host code that turns their errors into a Status (cuda_status.h).
// A launch error says little by itself ("invalid configuration argument"); the launcher that
// sees it records which kernel it was and with what shape, and CudaStatus attaches that record
// to the Status the model returns. Recording costs nothing on success and never synchronizes,
// so launches stay asynchronous and capturable into CUDA graphs.

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace tandem::workers::cuda {

// One failed launch: the error, the kernel and its launch shape, and the device it was on.
struct LaunchFailure {
  cudaError_t error = cudaSuccess;
  const char* kernel = "";  // a string literal
  dim3 grid;
  dim3 block;
  size_t shared_bytes = 0;
  int device = -1;  // -1 when the current device could not be read either
};

// Remembers `failure` as this thread's pending launch failure unless one is already pending
// (the first failure is the informative one; later ones are usually its consequence).
void RecordLaunchFailure(const LaunchFailure& failure);
// Hands over (and clears) this thread's pending launch failure; false when there is none.
bool TakeLaunchFailure(LaunchFailure* failure);
// "kernel RmsNormKernel<<<grid (4, 1, 1), block (256, 1, 1), 0 shared bytes>>> on device 0:
// cudaErrorInvalidConfiguration (invalid configuration argument)".
std::string DescribeLaunchFailure(const LaunchFailure& failure);

// Checks the launch just enqueued on this thread (cudaGetLastError right after <<<...>>>, which
// also reports a sticky error left by earlier work) and records a failure with its shape.
// Returns the error for the launcher to return.
cudaError_t RecordLaunchError(cudaError_t err, const char* kernel, dim3 grid, dim3 block,
                              size_t shared_bytes);
inline cudaError_t CheckLaunch(const char* kernel, dim3 grid, dim3 block, size_t shared_bytes) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return err;
  return RecordLaunchError(err, kernel, grid, block, shared_bytes);
}

}  // namespace tandem::workers::cuda
