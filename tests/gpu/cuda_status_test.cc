// The CUDA error plumbing (launch_check.h, cuda_status.h). Runs with or without a device (label
// unit): without one, every allocation and launch fails, and the failures must say so clearly.
#include "workers/cuda/cuda_status.h"

#include <cuda_runtime.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "workers/cuda/cuda_kernels.h"
#include "workers/cuda/launch_check.h"

namespace tandem::workers::cuda {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

bool HaveDevice() {
  int n = 0;
  const bool have = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  (void)cudaGetLastError();  // a failed probe must not be reported by the next check
  return have;
}

LaunchFailure RmsNormFailure() {
  LaunchFailure f;
  f.error = cudaErrorInvalidConfiguration;
  f.kernel = "RmsNormKernel";
  f.grid = dim3(4);
  f.block = dim3(2048, 1, 1);
  f.shared_bytes = 64;
  f.device = 1;
  return f;
}

TEST(LaunchCheckTest, DescribesTheKernelItsShapeTheDeviceAndTheError) {
  EXPECT_EQ(DescribeLaunchFailure(RmsNormFailure()),
            "kernel RmsNormKernel<<<grid (4, 1, 1), block (2048, 1, 1), 64 shared bytes>>> on "
            "device 1: cudaErrorInvalidConfiguration (invalid configuration argument)");
  LaunchFailure lost = RmsNormFailure();
  lost.device = -1;
  EXPECT_THAT(DescribeLaunchFailure(lost), HasSubstr(">>> on an unknown device: "));
}

TEST(LaunchCheckTest, KeepsTheFirstFailureUntilTaken) {
  LaunchFailure taken;
  EXPECT_FALSE(TakeLaunchFailure(&taken));
  RecordLaunchFailure(RmsNormFailure());
  LaunchFailure later = RmsNormFailure();
  later.kernel = "AddKernel";
  RecordLaunchFailure(later);
  ASSERT_TRUE(TakeLaunchFailure(&taken));
  EXPECT_STREQ(taken.kernel, "RmsNormKernel");
  EXPECT_FALSE(TakeLaunchFailure(&taken));
}

TEST(CudaStatusTest, NamesWhatFailedAndAttachesAPendingLaunchFailure) {
  EXPECT_TRUE(CudaStatus(cudaSuccess, "anything").ok());
  const absl::Status oom = CudaStatus(cudaErrorMemoryAllocation, "cudaMemcpy (weights)");
  EXPECT_EQ(oom.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(oom.message()),
              AllOf(StartsWith("cudaMemcpy (weights): CUDA error "
                               "cudaErrorMemoryAllocation (out of memory)"),
                    HasSubstr("device")));
  // A launch failure recorded by a launcher goes into the Status of the call that returned it.
  RecordLaunchFailure(RmsNormFailure());
  const absl::Status launch = CudaStatus(cudaErrorInvalidConfiguration, "RmsNorm(q_, ...)");
  EXPECT_EQ(launch.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(launch.message()),
              AllOf(StartsWith("RmsNorm(q_, ...): CUDA error cudaErrorInvalidConfiguration"),
                    HasSubstr("failed launch: kernel RmsNormKernel<<<grid (4, 1, 1), block "
                              "(2048, 1, 1), 64 shared bytes>>> on device 1")));
  EXPECT_TRUE(TakeLaunchFailureStatus().ok()) << "taken by CudaStatus";
  // One nobody turned into a Status is reported at the engine's step boundary.
  RecordLaunchFailure(RmsNormFailure());
  EXPECT_THAT(std::string(TakeLaunchFailureStatus().message()),
              StartsWith("failed launch: kernel RmsNormKernel<<<"));
  EXPECT_TRUE(TakeLaunchFailureStatus().ok());
}

TEST(CudaStatusTest, TheMacroReturnsTheStatusWithTheExpressionOrTheGivenDescription) {
  auto by_expression = []() -> absl::Status {
    TANDEM_CUDA_RETURN(cudaErrorInvalidValue);
    return absl::OkStatus();
  };
  EXPECT_THAT(std::string(by_expression().message()),
              StartsWith("cudaErrorInvalidValue: CUDA error"));
  auto described = []() -> absl::Status {
    TANDEM_CUDA_RETURN(cudaErrorInvalidValue, "the step");
    return absl::OkStatus();
  };
  EXPECT_THAT(std::string(described().message()),
              StartsWith("the step: CUDA error cudaErrorInvalidValue"));
  auto fine = []() -> absl::Status {
    TANDEM_CUDA_RETURN(cudaSuccess, "never");
    return absl::InvalidArgumentError("reached the end");
  };
  EXPECT_EQ(fine().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CudaStatusTest, CublasErrorsNameTheDevice) {
  EXPECT_TRUE(CublasStatus(CUBLAS_STATUS_SUCCESS, "cublasCreate").ok());
  const absl::Status s = CublasStatus(CUBLAS_STATUS_NOT_INITIALIZED, "cublasCreate");
  EXPECT_THAT(std::string(s.message()), AllOf(StartsWith("cublasCreate: cuBLAS error "
                                                         "CUBLAS_STATUS_NOT_INITIALIZED"),
                                              HasSubstr(" on "), HasSubstr("device")));
  EXPECT_EQ(CublasStatus(CUBLAS_STATUS_ALLOC_FAILED, "cublasCreate").code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(DeviceAllocTest, AFailedAllocationNamesItsSizeItsPurposeAndTheDevice) {
  // More than any device has: fails with or without one.
  void* p = reinterpret_cast<void*>(1);
  const size_t huge = size_t{1} << 52;
  const absl::Status s = DeviceAlloc(&p, huge, "the test's buffer");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(p, nullptr);
  EXPECT_THAT(std::string(s.message()),
              AllOf(StartsWith("cudaMalloc of 4503599627370496 bytes for the test's "
                               "buffer on "),
                    HasSubstr("device")));
  if (HaveDevice()) {
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(std::string(s.message()), HasSubstr("on device "));
    ASSERT_TRUE(DeviceAlloc(&p, 1024, "a small buffer").ok());
    EXPECT_NE(p, nullptr);
    cudaFree(p);
  } else {
    // No driver: cudaMalloc says so (cudaErrorInsufficientDriver on a machine without one) and
    // the current device cannot be named either.
    EXPECT_THAT(std::string(s.message()), HasSubstr("on no usable device (cudaGetDevice: "));
  }
  // A failed allocation is not left behind for the next launch check to report as its own.
  EXPECT_TRUE(TakeLaunchFailureStatus().ok());
}

TEST(DeviceAllocTest, PinnedHostAllocationsFailClearlyWithoutADriver) {
  if (HaveDevice()) GTEST_SKIP() << "a device is present: pinned memory is available";
  void* p = nullptr;
  const absl::Status s = PinnedHostAlloc(&p, 4096, "staging");
  EXPECT_THAT(std::string(s.message()),
              AllOf(StartsWith("cudaMallocHost of 4096 pinned bytes for staging"),
                    HasSubstr("no usable device")));
  EXPECT_EQ(p, nullptr);
}

TEST(LaunchCheckTest, ALaunchWithoutADriverFailsNamingItsKernelAndShape) {
  // With a device this launch would run on null pointers; the no-driver path is what is tested.
  if (HaveDevice()) GTEST_SKIP() << "needs a machine without a CUDA driver";
  const cudaError_t err = Add(nullptr, nullptr, 1000, nullptr, nullptr);
  ASSERT_NE(err, cudaSuccess);
  const absl::Status s = CudaStatus(err, "Add(h_, y_, n * H, h_, s)");
  EXPECT_THAT(std::string(s.message()),
              AllOf(StartsWith("Add(h_, y_, n * H, h_, s): CUDA error "),
                    HasSubstr("failed launch: kernel AddKernel<<<grid (4, 1, 1), block (256, 1, "
                              "1), 0 shared bytes>>> on an unknown device")));
}

}  // namespace
}  // namespace tandem::workers::cuda
