#include "workers/cuda/launch_check.h"

#include <cstdio>

namespace tandem::workers::cuda {
namespace {

// Per thread: the engine thread launches everything of one engine, and a failure must not leak
// into another thread's Status.
thread_local LaunchFailure pending_failure;

std::string Dim(const dim3& d) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "(%u, %u, %u)", d.x, d.y, d.z);
  return buf;
}

}  // namespace

void RecordLaunchFailure(const LaunchFailure& failure) {
  if (pending_failure.error == cudaSuccess) pending_failure = failure;
}

bool TakeLaunchFailure(LaunchFailure* failure) {
  if (pending_failure.error == cudaSuccess) return false;
  *failure = pending_failure;
  pending_failure = LaunchFailure();
  return true;
}

std::string DescribeLaunchFailure(const LaunchFailure& f) {
  std::string out = "kernel ";
  out += f.kernel;
  out += "<<<grid " + Dim(f.grid) + ", block " + Dim(f.block) + ", " +
         std::to_string(f.shared_bytes) + " shared bytes>>> on ";
  out += f.device >= 0 ? "device " + std::to_string(f.device) : std::string("an unknown device");
  out += ": ";
  out += cudaGetErrorName(f.error);
  out += " (";
  out += cudaGetErrorString(f.error);
  out += ")";
  return out;
}

cudaError_t RecordLaunchError(cudaError_t err, const char* kernel, dim3 grid, dim3 block,
                              size_t shared_bytes) {
  LaunchFailure f;
  f.error = err;
  f.kernel = kernel;
  f.grid = grid;
  f.block = block;
  f.shared_bytes = shared_bytes;
  int device = -1;
  // Host-only query; it fails too when the driver is missing or lost, hence the -1 (and its own
  // error is cleared so that the next launch is not blamed for it).
  if (cudaGetDevice(&device) == cudaSuccess) {
    f.device = device;
  } else {
    (void)cudaGetLastError();
  }
  RecordLaunchFailure(f);
  return err;
}

}  // namespace tandem::workers::cuda
