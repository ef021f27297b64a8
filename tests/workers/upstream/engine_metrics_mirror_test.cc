#include "workers/upstream/engine_metrics_mirror.h"

#include <string>
#include <vector>

#include "common/prometheus_text.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"
#include "tests/workers/upstream/fixture.h"

namespace tandem::workers::upstream {
namespace {

std::vector<Sample> Parse(const std::string& text) {
  auto samples = ParsePrometheusText(text);
  EXPECT_TRUE(samples.ok()) << samples.status();
  return samples.ok() ? *samples : std::vector<Sample>{};
}

// What a scrape of the worker would read of the mirror.
std::vector<Sample> Served(const EngineMetricsMirror& mirror) {
  return Parse(prometheus::TextSerializer().Serialize(mirror.Collect()));
}

TEST(EngineMetricsMirrorTest, EveryEngineSeriesIsServedAgainWithTheEnginesLabel) {
  for (const auto& [profile, fixture] :
       std::vector<std::pair<std::string, std::string>>{{"vllm", "vllm.prom"},
                                                        {"vllm", "vllm_old.prom"},
                                                        {"sglang", "sglang_router.prom"},
                                                        {"trtllm", "trtllm.prom"},
                                                        {"llamacpp", "llamacpp.prom"}}) {
    SCOPED_TRACE(fixture);
    const std::vector<Sample> engine = Parse(Fixture(fixture));
    ASSERT_FALSE(engine.empty());
    EngineMetricsMirror mirror(profile, 100000);
    mirror.Update(engine);
    const std::vector<Sample> served = Served(mirror);
    ASSERT_EQ(served.size(), engine.size());
    for (const Sample& e : engine) {
      std::map<std::string, std::string> want = e.labels;
      want["tandem_engine"] = profile;
      bool found = false;
      for (const Sample& s : served) {
        found |= s.name == e.name && s.labels == want && s.value == e.value;
      }
      EXPECT_TRUE(found) << e.name;
    }
  }
}

TEST(EngineMetricsMirrorTest, TheWorkersOwnNamesTheCapAndStaleDataLeaveSeriesOut) {
  EngineMetricsMirror mirror("vllm", 2);
  mirror.Update(
      Parse("tandem_worker_num_requests_running 3\n"
            "vllm:num_requests_running{engine=\"0\",tandem_engine=\"spoof\"} 1\n"
            "vllm:num_requests_waiting 2\n"
            "vllm:kv_cache_usage_perc 0.5\n"));
  std::vector<Sample> served = Served(mirror);
  ASSERT_EQ(served.size(), 2u) << "tandem_* dropped, then the first two kept";
  EXPECT_EQ(served[0].name, "vllm:num_requests_running");
  EXPECT_EQ(served[0].labels,
            (std::map<std::string, std::string>{{"engine", "0"}, {"tandem_engine", "vllm"}}));
  EXPECT_EQ(served[1].name, "vllm:num_requests_waiting");

  mirror.Clear();
  EXPECT_TRUE(Served(mirror).empty());
  EngineMetricsMirror off("vllm", 0);
  off.Update(Parse("vllm:num_requests_waiting 2\n"));
  EXPECT_TRUE(Served(off).empty());
}

}  // namespace
}  // namespace tandem::workers::upstream
