#include "gateway/intake/token_bucket.h"

#include <chrono>

#include "gtest/gtest.h"

namespace tandem::gateway {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

TEST(TokenBucketTest, RefillsAtItsRateUpToItsBurst) {
  const auto t0 = Clock::now();
  TokenBucket b;
  b.Configure(/*rate=*/10, /*burst=*/5, t0);
  EXPECT_EQ(b.WaitFor(5, t0), 0);
  b.Take(5);
  EXPECT_NEAR(b.WaitFor(1, t0), 0.1, 1e-9);
  EXPECT_EQ(b.WaitFor(1, t0 + milliseconds(100)), 0);
  // Never more than the burst, however long it was idle.
  EXPECT_NEAR(b.WaitFor(5, t0 + std::chrono::hours(1)), 0, 1e-9);
  EXPECT_NEAR(b.level(), 5, 1e-9);
  // Debt: a large request runs, and the next waits until it is repaid.
  b.Take(25);
  EXPECT_NEAR(b.WaitFor(0, t0 + std::chrono::hours(1)), 2.0, 1e-6);
  TokenBucket unlimited;
  unlimited.Configure(0, 0, t0);
  unlimited.Take(1e9);
  EXPECT_EQ(unlimited.WaitFor(1, t0), 0);
}

}  // namespace
}  // namespace tandem::gateway
