#include "gateway/signals/trigger.h"

#include "gtest/gtest.h"

namespace tandem::gateway {
namespace {

TEST(TriggerTest, HysteresisBandAndMinimumDwell) {
  router::TriggerSpec spec;
  spec.name = "busy";
  spec.enter = {router::Op::kGt, 10};
  spec.exit = {router::Op::kLt, 5};
  spec.min_dwell_seconds = 2;
  const auto t0 = std::chrono::steady_clock::now();
  auto at = [&](double s) {
    return t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(s));
  };
  Trigger t(spec, t0);
  EXPECT_FALSE(t.Update(Trigger::Input::kValue, 20, at(1)));  // dwell since creation: 1 s
  EXPECT_TRUE(t.Update(Trigger::Input::kValue, 20, at(2.5)));
  EXPECT_TRUE(t.on());
  // Inside the band: stays on. Below exit but within the dwell: stays on.
  EXPECT_FALSE(t.Update(Trigger::Input::kValue, 7, at(5)));
  EXPECT_FALSE(t.Update(Trigger::Input::kValue, 1, at(3)));
  EXPECT_TRUE(t.on());
  EXPECT_TRUE(t.Update(Trigger::Input::kValue, 1, at(5)));
  EXPECT_FALSE(t.on());
  // Between the thresholds never enters.
  EXPECT_FALSE(t.Update(Trigger::Input::kValue, 9, at(10)));
  // No data counts as the exit side; staleness forces at once, dwell or not.
  EXPECT_TRUE(t.Update(Trigger::Input::kForcedOn, 0, at(10.1)));
  EXPECT_TRUE(t.on());
  EXPECT_TRUE(t.Update(Trigger::Input::kForcedOff, 0, at(10.2)));
  EXPECT_TRUE(t.Update(Trigger::Input::kValue, 50, at(13)));
  EXPECT_TRUE(t.Update(Trigger::Input::kNoData, 0, at(16)));
  EXPECT_FALSE(t.on());
}

}  // namespace
}  // namespace tandem::gateway
