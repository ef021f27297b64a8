#include "common/prometheus_text.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

TEST(PrometheusTextTest, ParsesSamplesLabelsEscapesAndSpecialValues) {
  auto samples = ParsePrometheusText(R"(# HELP tandem_worker_num_requests_waiting Requests queued.
# TYPE tandem_worker_num_requests_waiting gauge
tandem_worker_num_requests_waiting{model_name="qwen"} 7
tandem_worker_time_to_first_token_seconds_bucket{model_name="qwen",le="0.1"} 3 1700000000000
tandem_worker_time_to_first_token_seconds_bucket{model_name="qwen",le="+Inf"} 5
weird{path="C:\\dir",quote="say \"hi\"",nl="a\nb",} -Inf
up 1e-3
nan_metric NaN
)");
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 6u);
  EXPECT_EQ((*samples)[0].name, "tandem_worker_num_requests_waiting");
  EXPECT_EQ((*samples)[0].labels.at("model_name"), "qwen");
  EXPECT_EQ((*samples)[0].value, 7);
  EXPECT_EQ((*samples)[2].labels.at("le"), "+Inf");
  EXPECT_EQ((*samples)[3].labels.at("path"), "C:\\dir");
  EXPECT_EQ((*samples)[3].labels.at("quote"), "say \"hi\"");
  EXPECT_EQ((*samples)[3].labels.at("nl"), "a\nb");
  EXPECT_TRUE(std::isinf((*samples)[3].value) && (*samples)[3].value < 0);
  EXPECT_DOUBLE_EQ((*samples)[4].value, 0.001);
  EXPECT_TRUE(std::isnan((*samples)[5].value));
}

TEST(PrometheusTextTest, MalformedLinesNameLineAndColumn) {
  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {"ok 1\n{x=\"1\"} 2\n", "line 2 column 1: expected a metric name"},
           {"m{x=1} 2", "line 1 column 5: expected '\"'"},
           {"m{x=\"1\" 2", "expected ',' or '}'"},
           {"m{x=\"1\"} two", "expected a number"},
           {"m 1 2 3", "unexpected text after the sample"},
           {"m{x=\"1\",x=\"2\"} 1", "duplicate label"},
           {"m{x=\"\\q\"} 1", "unknown escape"},
           {"m{x=\"open} 1", "unterminated label value"},
           {"m1", "expected a space before the value"}}) {
    auto r = ParsePrometheusText(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(want)) << text;
  }
}

}  // namespace
}  // namespace tandem
