#include "workers/worker_config.h"

#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::workers {
namespace {

using ::testing::HasSubstr;

WorkerConfig ValidConfig() {
  WorkerConfig c;
  c.model = "qwen";
  c.device = "cpu";
  c.engine = EngineKind::kNative;
  c.weights.checkpoint = "/models/qwen";
  c.server_credentials = grpc::InsecureServerCredentials();
  return c;
}

TEST(WorkerConfigTest, ACheckpointOnTheCpuIsValid) {
  EXPECT_TRUE(ValidConfig().Validate().ok()) << ValidConfig().Validate();
}

TEST(WorkerConfigTest, TheSimulatorNeedsNoWeights) {
  WorkerConfig c = ValidConfig();
  c.engine = EngineKind::kSynthetic;
  c.weights.checkpoint.clear();
  EXPECT_TRUE(c.Validate().ok());
}

TEST(WorkerConfigTest, WeightsComeFromExactlyOnePlace) {
  WorkerConfig c = ValidConfig();
  c.weights.checkpoint.clear();
  EXPECT_THAT(std::string(c.Validate().message()), HasSubstr("--checkpoint=DIR"));
  c.weights.random_weights = true;
  EXPECT_THAT(std::string(c.Validate().message()), HasSubstr("--model_config=PATH"));
  c.weights.model_config = "workers/model/configs/qwen3_5_moe/config.json";
  EXPECT_TRUE(c.Validate().ok());
  c.weights.checkpoint = "/models/qwen";
  EXPECT_THAT(std::string(c.Validate().message()), HasSubstr("drop --checkpoint"));
  c.weights.checkpoint.clear();
  c.engine = EngineKind::kSynthetic;
  EXPECT_THAT(std::string(c.Validate().message()), HasSubstr("needs --engine=native"));
  c.engine = EngineKind::kNative;
  c.weights.random_weights = false;
  c.weights.checkpoint = "/models/qwen";
  EXPECT_THAT(std::string(c.Validate().message()), HasSubstr("--model_config is for"));
}

TEST(WorkerConfigTest, AnUpstreamWorkerMayServeAnotherModelGivenItsLimits) {
  WorkerConfig c = ValidConfig();
  c.engine = EngineKind::kUpstream;
  c.weights.checkpoint.clear();
  c.upstream.url = "http://127.0.0.1:8000";
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
  c.model = "llama";
  EXPECT_THAT(std::string(c.Validate().message()),
              HasSubstr("--max_context_tokens and --max_output_tokens"));
  c.max_context_tokens = 8192;
  EXPECT_FALSE(c.Validate().ok());
  c.max_output_tokens = 1024;
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
}

TEST(WorkerConfigTest, EachOutOfRangeValueNamesItsFlag) {
  struct Case {
    std::string flag;
    std::function<void(WorkerConfig&)> set;
  };
  const std::vector<Case> cases = {
      {"--model", [](WorkerConfig& c) { c.model.clear(); }},
      {"--device", [](WorkerConfig& c) { c.device.clear(); }},
      {"--memory_budget", [](WorkerConfig& c) { c.memory_budget = 0; }},
      {"--native_threads", [](WorkerConfig& c) { c.native_threads = -1; }},
      {"--gpu_memory_fraction", [](WorkerConfig& c) { c.gpu_memory_fraction = 0; }},
      {"--max_batch_size", [](WorkerConfig& c) { c.scheduler.max_batch_size = 0; }},
      {"--max_queue", [](WorkerConfig& c) { c.scheduler.max_queue = -1; }},
      {"--synthetic_time_scale", [](WorkerConfig& c) { c.synthetic.time_scale = -1; }},
      {"--max_output_tokens", [](WorkerConfig& c) { c.max_output_tokens = -1; }},
      {"--max_request_bytes", [](WorkerConfig& c) { c.max_request_bytes = 10; }},
      {"--image_threads", [](WorkerConfig& c) { c.image_pool.threads = 0; }},
      {"--image_queue", [](WorkerConfig& c) { c.image_pool.queue = -1; }},
      {"--drain_timeout", [](WorkerConfig& c) { c.drain_timeout = -absl::Seconds(1); }},
      {"--device_refresh_interval", [](WorkerConfig& c) { c.device_refresh_interval = {}; }},
  };
  for (const Case& k : cases) {
    WorkerConfig c = ValidConfig();
    k.set(c);
    const absl::Status s = c.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << k.flag;
    EXPECT_THAT(std::string(s.message()), HasSubstr(k.flag));
  }
}

}  // namespace
}  // namespace tandem::workers

namespace tandem::workers {
namespace {

TEST(WorkerConfigTest, DefaultLimitsFitEachOther) {
  const WorkerConfig c = ValidConfig();
  EXPECT_TRUE(c.LimitWarnings().empty());
  // A worker takes the largest request a gateway forwards (its --max_request_bytes, 32 MiB by
  // default, plus its routing fields).
  EXPECT_GE(c.max_request_bytes, (32ll << 20) + (1 << 20));
  WorkerConfig small = ValidConfig();
  small.max_request_bytes = 1 << 20;
  ASSERT_EQ(small.LimitWarnings().size(), 1u);
  EXPECT_THAT(small.LimitWarnings()[0], HasSubstr("--max_image_bytes (20971520) exceeds "
                                                  "--max_request_bytes (1048576)"));
}

}  // namespace
}  // namespace tandem::workers
