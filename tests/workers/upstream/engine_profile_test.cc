#include "workers/upstream/engine_profile.h"

#include "gtest/gtest.h"
#include "tests/support/temp_path.h"
#include "tests/workers/upstream/fixture.h"
#include "workers/upstream/engine_signals.h"

namespace tandem::workers::upstream {
namespace {

TEST(EngineProfileTest, EveryShippedProfileLoads) {
  std::vector<std::string> names = BuiltinProfileNames();
  EXPECT_EQ(names.size(), 5u);
  for (const std::string& name : names) {
    auto p = LoadEngineProfile(name);
    ASSERT_TRUE(p.ok()) << name << ": " << p.status();
    EXPECT_EQ(p->name, name);
    EXPECT_EQ(p->chat_path, "/v1/chat/completions");
    EXPECT_FALSE(p->reasoning_fields.empty());
  }
}

TEST(EngineProfileTest, UnknownNamesAndBadFilesAreClearErrors) {
  auto unknown = LoadEngineProfile("tgi");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("vllm"), absl::string_view::npos);
  const std::string bad = testing::WriteTempFile(
      "bad.yaml", "name: x\nendpoints: {chat: v1/chat, models: /m, health: /h}\n");
  auto b = LoadEngineProfile(bad);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("endpoints.chat"), absl::string_view::npos);
  EXPECT_EQ(ParseEngineProfile("name: x\nendpoints: {chat: /c, models: /m, health: /h}\n"
                               "reasoning: {on: 'nope', off: '', budget: ''}\n")
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(EngineProfileTest, AProfileFileIsData) {
  const std::string file = testing::WriteTempFile("mine.yaml", R"(name: mine
endpoints: {chat: /v1/chat/completions, models: /v1/models, health: /ready, metrics: /stats}
readiness: {starting_statuses: [503, 425]}
reasoning: {fields: [thoughts], on: '{"think":true}', off: '{"think":false}', budget: '{"max_think":$BUDGET}'}
continuation: '{"prefix":true}'
request: '{}'
metrics: {waiting: [my_queue], running: [my_running]}
)");
  auto p = LoadEngineProfile(file);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->health_path, "/ready");
  EXPECT_EQ(p->starting_statuses, (std::vector<int>{503, 425}));
  EXPECT_EQ(p->Budget(64)["max_think"], 64);
}

double Value(const std::optional<double>& v) { return v.value_or(-1); }

TEST(EngineSignalsTest, MetricNamesAreReadAcrossEnginesVersionsAndSpellings) {
  auto read = [](const std::string& profile, const std::string& fixture) {
    auto p = LoadEngineProfile(profile);
    EXPECT_TRUE(p.ok());
    auto samples = ParsePrometheusText(Fixture(fixture));
    EXPECT_TRUE(samples.ok()) << fixture << ": " << samples.status();
    return ReadEngineSignals(samples.ok() ? *samples : std::vector<Sample>{}, *p);
  };
  EngineSignals v = read("vllm", "vllm.prom");
  EXPECT_EQ(Value(v.running), 7) << "data-parallel ranks summed";
  EXPECT_EQ(Value(v.waiting), 1);
  EXPECT_EQ(Value(v.kv_cache_usage), 0.5) << "the fullest rank";
  EXPECT_EQ(Value(v.prompt_tokens_total), 2000);
  EngineSignals old = read("vllm", "vllm_old.prom");
  EXPECT_EQ(Value(old.kv_cache_usage), 0.875) << "gpu_cache_usage_perc before the rename";
  EXPECT_EQ(Value(old.waiting), 5);
  EngineSignals s = read("sglang", "sglang_router.prom");
  EXPECT_EQ(Value(s.running), 6) << "sglang_* as re-exported matches sglang:*";
  EXPECT_EQ(Value(s.waiting), 9);
  EXPECT_EQ(Value(s.kv_cache_usage), 0.42);
  EngineSignals t = read("trtllm", "trtllm.prom");
  EXPECT_EQ(Value(t.kv_cache_usage), 0.1);
  EngineSignals l = read("llamacpp", "llamacpp.prom");
  EXPECT_EQ(Value(l.running), 3);
  EXPECT_EQ(Value(l.waiting), 2);
  EXPECT_FALSE(l.kv_cache_usage.has_value()) << "llama-server has no KV gauge";
}

}  // namespace
}  // namespace tandem::workers::upstream
