#include "workers/device.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::workers {
namespace {

using ::testing::HasSubstr;

TEST(DeviceTest, CpuIsAvailableWhenAskedFor) {
  auto d = OpenDevice("cpu");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->id, "cpu");
  EXPECT_GT(d->memory_total_bytes, 0u);
  EXPECT_LE(d->memory_free_bytes, d->memory_total_bytes);
}

TEST(DeviceTest, BadSpecIsAClearError) {
  auto d = OpenDevice("gpu0");
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), HasSubstr("expected 'cpu' or a CUDA device ordinal"));
}

TEST(DeviceTest, MissingGpuIsAnErrorNeverAFallback) {
  // Ordinal 4096 does not exist on any machine: with or without CUDA this must fail, and say
  // how to run on the CPU instead.
  auto d = OpenDevice("4096");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(d.status().message(), HasSubstr("--device=cpu"));
}

}  // namespace
}  // namespace tandem::workers
