#include "workers/cpu/cpu_engine.h"

#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/think_tokenizer.h"
#include "workers/sampler.h"
#include "workers/simulator/synthetic_tokenizer.h"

namespace tandem::workers {
namespace {

using ::testing::HasSubstr;

// A model whose logits favour (last token + 1) mod vocab, so greedy output is predictable, and
// that records what it was fed.
class CountingModel final : public cpu::CpuModel {
 public:
  struct State final : cpu::SequenceState {
    int64_t position() const override { return pos; }
    std::unique_ptr<cpu::SequenceState> Clone() const override {
      return std::make_unique<State>(*this);
    }
    int64_t bytes() const override { return 1000 + 100 * pos; }
    int64_t pos = 0;
  };
  CountingModel() {
    shape_.vocab_size = 16;
    shape_.max_positions = 64;
    shape_.kv_bytes_per_token = 100;
    shape_.state_bytes = 1000;
  }
  const model::ModelShape& shape() const override { return shape_; }
  std::unique_ptr<cpu::SequenceState> NewState() const override {
    return std::make_unique<State>();
  }
  absl::Status Forward(cpu::SequenceState* state, absl::Span<const int32_t> tokens, bool,
                       std::vector<float>* logits) const override {
    auto* s = static_cast<State*>(state);
    s->pos += static_cast<int64_t>(tokens.size());
    fed.push_back(static_cast<int>(tokens.size()));
    logits->assign(shape_.vocab_size, 0.0f);
    (*logits)[(tokens.back() + 1) % shape_.vocab_size] = 5.0f;
    (*logits)[(tokens.back() + 2) % shape_.vocab_size] = 4.0f;
    return absl::OkStatus();
  }
  mutable std::vector<int> fed;

 private:
  model::ModelShape shape_;
};

CpuEngine MakeEngine(int64_t budget, CountingModel** model_out = nullptr) {
  auto model = std::make_unique<CountingModel>();
  if (model_out != nullptr) *model_out = model.get();
  CpuEngineOptions o;
  o.model_name = "qwen";
  o.model_id = "test/counting";
  o.memory_budget_bytes = budget;
  return CpuEngine(std::move(model), std::make_unique<SyntheticTokenizer>(0), {15}, o);
}

TEST(NativeEngineTest, PrefillsOnceThenDecodesOneTokenPerStepAndStopsOnEos) {
  CountingModel* model = nullptr;
  CpuEngine engine = MakeEngine(1 << 20, &model);
  SequenceSpec spec;
  spec.id = 7;
  spec.prompt = {3, 4, 10};
  spec.sampling.temperature = 0;
  spec.max_tokens = 8;
  ASSERT_TRUE(engine.AddSequence(spec).ok());
  EXPECT_EQ(engine.MemoryReservedBytes(), 1000 + 100 * (3 + 8));
  std::vector<int32_t> tokens;
  bool eos = false;
  for (int i = 0; i < 8 && !eos; ++i) {
    std::vector<StepOutput> out;
    ASSERT_TRUE(engine.Step({7}, &out).ok());
    ASSERT_EQ(out.size(), 1u);
    tokens.push_back(out[0].token);
    eos = out[0].end_of_sequence;
  }
  // Greedy: 11, 12, 13, 14, 15 (the stop id ends it).
  EXPECT_EQ(tokens, (std::vector<int32_t>{11, 12, 13, 14, 15}));
  EXPECT_TRUE(eos);
  EXPECT_EQ(model->fed, (std::vector<int>{3, 1, 1, 1, 1}));
  engine.RemoveSequence(7);
  EXPECT_EQ(engine.MemoryReservedBytes(), 0);
  EXPECT_FALSE(engine.Info().vision);  // no encoder given: the router keeps images away
  EXPECT_EQ(engine.Info().engine, "native");
}

TEST(NativeEngineTest, AdmissionRespectsTheMemoryBudget) {
  CpuEngine engine = MakeEngine(/*budget=*/3000);
  SequenceSpec spec;
  spec.prompt = {1, 2};
  spec.max_tokens = 8;  // 1000 + 100 * 10 = 2000 bytes
  spec.id = 1;
  ASSERT_TRUE(engine.AddSequence(spec).ok());
  spec.id = 2;
  const absl::Status full = engine.AddSequence(spec);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(full.message()), HasSubstr("2000 bytes needed"));
  EXPECT_EQ(engine.SequenceBytes(2, 8), 2000);
  engine.RemoveSequence(1);
  EXPECT_TRUE(engine.AddSequence(spec).ok());
}

TEST(NativeEngineTest, TheThinkingBudgetForcesTheEndOfThinking) {
  CpuEngineOptions o;
  o.model_name = "qwen";
  o.memory_budget_bytes = 1 << 20;
  // "<think>" is token 2 and "</think>" token 12.
  CpuEngine engine(std::make_unique<CountingModel>(),
                   std::make_unique<testing::ThinkTokenizer>(2, 12), {15}, o);
  SequenceSpec spec;
  spec.id = 1;
  spec.prompt = {1, 2};  // the generation prompt opened a thinking block
  spec.sampling.temperature = 0;
  spec.max_tokens = 16;
  spec.thinking_budget = 3;
  ASSERT_TRUE(engine.AddSequence(spec).ok());
  std::vector<int32_t> tokens;
  for (int i = 0; i < 10; ++i) {
    std::vector<StepOutput> out;
    ASSERT_TRUE(engine.Step({1}, &out).ok());
    tokens.push_back(out[0].token);
    if (out[0].end_of_sequence) break;
  }
  // Three thinking tokens, then </think> (12) forced instead of 6, then the answer.
  EXPECT_EQ(tokens, (std::vector<int32_t>{3, 4, 5, 12, 13, 14, 15}));
  // Without a budget the model thinks as long as it likes (until it writes </think> itself).
  CpuEngine free(std::make_unique<CountingModel>(),
                 std::make_unique<testing::ThinkTokenizer>(2, 12), {15}, o);
  spec.thinking_budget = 0;
  ASSERT_TRUE(free.AddSequence(spec).ok());
  std::vector<StepOutput> out;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(free.Step({1}, &out).ok());
  EXPECT_EQ(out[3].token, 6);
}

TEST(SamplerTest, GreedyTopKTopPAndSeededReproducibility) {
  Sampler sampler;
  std::mt19937_64 rng(1);
  const std::vector<float> logits = {0.0f, 3.0f, 2.9f, -5.0f, 1.0f};
  SamplingConfig greedy;
  greedy.temperature = 0;
  EXPECT_EQ(sampler.Sample(logits.data(), 5, greedy, rng), 1);
  // top_k 2: only tokens 1 and 2 ever come out.
  SamplingConfig k2;
  k2.temperature = 1.0f;
  k2.top_k = 2;
  std::map<int32_t, int> seen;
  for (int i = 0; i < 2000; ++i) ++seen[sampler.Sample(logits.data(), 5, k2, rng)];
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_GT(seen[1], seen[2]);
  // top_p small: the single most likely token.
  SamplingConfig p;
  p.temperature = 1.0f;
  p.top_p = 0.1f;
  for (int i = 0; i < 100; ++i) EXPECT_EQ(sampler.Sample(logits.data(), 5, p, rng), 1);
  // Same seed, same draws.
  SamplingConfig t;
  t.temperature = 1.5f;
  std::mt19937_64 a(42), b(42);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(sampler.Sample(logits.data(), 5, t, a), sampler.Sample(logits.data(), 5, t, b));
  }
}

TEST(CheckModelNameTest, TheRoutingNameMustFitTheArchitecture) {
  model::ModelConfig config;
  config.shape.architecture = model::Architecture::kNemotronH;
  std::string id;
  EXPECT_TRUE(CheckModelName("/ckpt", "nemotron", config, &id).ok());
  EXPECT_EQ(id, "local/nemotron_h");
  id.clear();
  const absl::Status wrong = CheckModelName("/ckpt", "qwen", config, &id);
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(wrong.message()),
              HasSubstr("/ckpt holds a nemotron_h model, but --model=qwen expects qwen3_5_moe"));
  EXPECT_THAT(std::string(CheckModelName("/ckpt", "llama", config, &id).message()),
              HasSubstr("expects qwen (qwen3_5_moe) or nemotron (nemotron_h)"));
}

TEST(CheckModelNameTest, RandomWeightsAlwaysShowInTheModelId) {
  model::ModelConfig config;
  config.shape.architecture = model::Architecture::kQwen35Moe;
  config.random_weights = true;
  std::string id;
  ASSERT_TRUE(CheckModelName("/ckpt", "qwen", config, &id).ok());
  EXPECT_EQ(id, "random-weights/qwen3_5_moe");
  id = "Qwen/Qwen3.5-35B-A3B";
  ASSERT_TRUE(CheckModelName("/ckpt", "qwen", config, &id).ok());
  EXPECT_EQ(id, "random-weights/Qwen/Qwen3.5-35B-A3B");
  ASSERT_TRUE(CheckModelName("/ckpt", "qwen", config, &id).ok());
  EXPECT_EQ(id, "random-weights/Qwen/Qwen3.5-35B-A3B");  // not prefixed twice
}

}  // namespace
}  // namespace tandem::workers
