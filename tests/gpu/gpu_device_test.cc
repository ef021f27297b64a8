// GPU tests (ctest label "gpu"): skipped when the build has no CUDA or the machine no device.
#include "gtest/gtest.h"
#include "workers/device.h"

namespace tandem::workers {
namespace {

TEST(GpuDeviceTest, OpensDeviceZeroAndRunsTheProbeKernel) {
  if (!BuiltWithCuda()) GTEST_SKIP() << "built without CUDA";
  auto d = OpenDevice("0");
  if (!d.ok()) GTEST_SKIP() << "no usable CUDA device: " << d.status();
  EXPECT_EQ(d->id, "cuda:0");
  EXPECT_FALSE(d->name.empty());
  EXPECT_GT(d->memory_total_bytes, 0u);
  EXPECT_GT(d->memory_free_bytes, 0u);
  EXPECT_TRUE(RefreshDeviceMemory(&*d).ok());
}

}  // namespace
}  // namespace tandem::workers
