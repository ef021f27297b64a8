#include "gateway/signals/promql.h"

#include <cmath>

#include "gateway/signals/signal_engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::gateway {
namespace {

using ::testing::HasSubstr;

TEST(PromQLResponseTest, ReadsOneSeriesScalarsAndEmptyResults) {
  auto one = ParsePromQLResponse(
      R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1700000000.1,"0.25"]}]}})");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_DOUBLE_EQ(**one, 0.25);
  auto scalar = ParsePromQLResponse(
      R"({"status":"success","data":{"resultType":"scalar","result":[1700000000,"3"]}})");
  ASSERT_TRUE(scalar.ok());
  EXPECT_DOUBLE_EQ(**scalar, 3);
  auto empty =
      ParsePromQLResponse(R"({"status":"success","data":{"resultType":"vector","result":[]}})");
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(empty->has_value());
  auto nan = ParsePromQLResponse(
      R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"NaN"]}]}})");
  ASSERT_TRUE(nan.ok());
  EXPECT_FALSE(nan->has_value());
}

TEST(PromQLResponseTest, ErrorsSayWhat) {
  EXPECT_THAT(
      std::string(
          ParsePromQLResponse(
              R"({"status":"error","errorType":"bad_data","error":"parse error at char 5"})")
              .status()
              .message()),
      HasSubstr("PromQL bad_data: parse error at char 5"));
  EXPECT_THAT(
      std::string(
          ParsePromQLResponse(
              R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"1"},"value":[1,"1"]},{"metric":{"a":"2"},"value":[1,"2"]}]}})")
              .status()
              .message()),
      HasSubstr("returned 2 series"));
  EXPECT_THAT(std::string(ParsePromQLResponse(
                              R"({"status":"success","data":{"resultType":"matrix","result":[]}})")
                              .status()
                              .message()),
              HasSubstr("result type 'matrix'"));
  EXPECT_FALSE(ParsePromQLResponse("not json").ok());
}

TEST(HistogramQuantileTest, InterpolatesLikePrometheus) {
  // 10 observations: 5 in (0, 0.1], 4 in (0.1, 0.5], 1 above 1.
  const std::map<double, double> b = {{0.1, 5}, {0.5, 9}, {1, 9}, {INFINITY, 10}};
  EXPECT_DOUBLE_EQ(*HistogramQuantile(0.5, b), 0.1);
  EXPECT_NEAR(*HistogramQuantile(0.7, b), 0.1 + 0.4 * (7 - 5) / 4.0, 1e-12);
  // In the +Inf bucket: the highest finite bound.
  EXPECT_DOUBLE_EQ(*HistogramQuantile(0.95, b), 1);
  EXPECT_FALSE(HistogramQuantile(0.5, {{0.1, 0}, {INFINITY, 0}}).has_value());
}

}  // namespace
}  // namespace tandem::gateway
