#include "workers/synthetic_engine.h"

#include "gtest/gtest.h"

namespace tandem::workers {
namespace {

// A clock that records sleeps instead of waiting.
class FakeClock final : public Clock {
 public:
  TimePoint Now() const override { return now_; }
  void SleepUntil(TimePoint t) override {
    slept_ += t - now_;
    now_ = t;
  }
  std::chrono::nanoseconds slept() const { return slept_; }

 private:
  TimePoint now_{};
  std::chrono::nanoseconds slept_{0};
};

SyntheticEngine Make(const std::string& model, SyntheticEngineOptions o, Clock* clock) {
  return SyntheticEngine(*SyntheticProfileFor(model), o, clock);
}

std::vector<int32_t> RunTokens(SyntheticEngine& e, uint64_t id, std::vector<int32_t> prompt,
                               float temperature, uint64_t seed, int steps) {
  SequenceSpec spec;
  spec.id = id;
  spec.prompt = std::move(prompt);
  spec.sampling.temperature = temperature;
  spec.sampling.seed = seed;
  EXPECT_TRUE(e.AddSequence(spec).ok());
  std::vector<int32_t> tokens;
  for (int i = 0; i < steps; ++i) {
    std::vector<StepOutput> out;
    const uint64_t ids[] = {id};
    EXPECT_TRUE(e.Step(ids, &out).ok());
    if (out[0].end_of_sequence) break;
    tokens.push_back(out[0].token);
  }
  e.RemoveSequence(id);
  return tokens;
}

TEST(SyntheticProfileTest, KnowsBothModelsAndTheirCapabilities) {
  auto qwen = SyntheticProfileFor("qwen");
  ASSERT_TRUE(qwen.ok());
  EXPECT_TRUE(qwen->info.vision);
  EXPECT_EQ(qwen->info.engine, "synthetic");
  auto nemotron = SyntheticProfileFor("nemotron");
  ASSERT_TRUE(nemotron.ok());
  EXPECT_FALSE(nemotron->info.vision);
  EXPECT_EQ(SyntheticProfileFor("llama").status().code(), absl::StatusCode::kNotFound);
}

TEST(SyntheticEngineTest, StepTimeFollowsTheProfile) {
  FakeClock clock;
  SyntheticEngine qwen = Make("qwen", {}, &clock);
  // Batch 1, no context: the measured 6.9 ms TPOT.
  EXPECT_NEAR(qwen.StepSeconds(0, 1, 0), 6.9e-3, 1e-9);
  // Batch 64: the whole-weight floor at 59% of the HBM bound, 14.6 ms / 0.59.
  EXPECT_NEAR(qwen.StepSeconds(0, 64, 0), 14.6e-3 / 0.59, 1e-9);
  // Context adds KV reads: 20 KiB per token at 59% of 4.8 TB/s.
  EXPECT_NEAR(qwen.StepSeconds(0, 1, 100000) - qwen.StepSeconds(0, 1, 0),
              100000 * 20480.0 / (4.8e12 * 0.59), 1e-9);
  // Nemotron's KV is 6 KiB per token, so long contexts cost it less.
  SyntheticEngine nemotron = Make("nemotron", {}, &clock);
  EXPECT_LT(nemotron.StepSeconds(0, 1, 200000) - nemotron.StepSeconds(0, 1, 0),
            qwen.StepSeconds(0, 1, 200000) - qwen.StepSeconds(0, 1, 0));
}

TEST(SyntheticEngineTest, SleepsForTheScaledStepTime) {
  FakeClock clock;
  SyntheticEngineOptions o;
  o.time_scale = 2.0;
  SyntheticEngine e = Make("qwen", o, &clock);
  RunTokens(e, 1, std::vector<int32_t>(1000, 7), 0, 0, 2);
  // Prefill of 1000 tokens plus two decode steps, doubled.
  const double want = 2.0 * (e.StepSeconds(1000, 1, 1000) + e.StepSeconds(0, 1, 1001));
  EXPECT_NEAR(std::chrono::duration<double>(clock.slept()).count(), want, 1e-6);
}

TEST(SyntheticEngineTest, GreedyOutputDependsOnlyOnThePrompt) {
  FakeClock clock;
  SyntheticEngineOptions o;
  o.time_scale = 0;
  SyntheticEngine e = Make("qwen", o, &clock);
  const auto a = RunTokens(e, 1, {1, 2, 3}, 0, 11, 10);
  const auto b = RunTokens(e, 2, {1, 2, 3}, 0, 99, 10);
  const auto c = RunTokens(e, 3, {1, 2, 4}, 0, 11, 10);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // With temperature the seed matters.
  EXPECT_NE(RunTokens(e, 4, {1, 2, 3}, 1, 11, 10), RunTokens(e, 5, {1, 2, 3}, 1, 12, 10));
  EXPECT_EQ(RunTokens(e, 6, {1, 2, 3}, 1, 11, 10), RunTokens(e, 7, {1, 2, 3}, 1, 11, 10));
}

TEST(SyntheticEngineTest, EndsAfterTheConfiguredLength) {
  FakeClock clock;
  SyntheticEngineOptions o;
  o.time_scale = 0;
  o.output_tokens = 5;
  SyntheticEngine e = Make("nemotron", o, &clock);
  EXPECT_EQ(RunTokens(e, 1, {5}, 0, 0, 100).size(), 5u);
}

TEST(SyntheticEngineTest, RejectsDuplicateAndUnknownSequences) {
  FakeClock clock;
  SyntheticEngine e = Make("qwen", {}, &clock);
  SequenceSpec s;
  s.id = 9;
  ASSERT_TRUE(e.AddSequence(s).ok());
  EXPECT_EQ(e.AddSequence(s).code(), absl::StatusCode::kAlreadyExists);
  std::vector<StepOutput> out;
  const uint64_t ids[] = {10};
  EXPECT_EQ(e.Step(ids, &out).code(), absl::StatusCode::kInternal);
}

TEST(SyntheticTokenizerTest, RejectsImagesForTextOnlyModelsAndCountsThemOtherwise) {
  google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage> m;
  auto* msg = m.Add();
  msg->set_role("user");
  msg->add_content()->set_text("look");
  msg->add_content()->mutable_image()->set_data("x");
  tandem::v1::ReasoningOptions r;
  SyntheticTokenizer text_only(0);
  EXPECT_EQ(text_only.EncodeChat(m, r).status().code(), absl::StatusCode::kInvalidArgument);
  SyntheticTokenizer vision(256);
  auto ids = vision.EncodeChat(m, r);
  ASSERT_TRUE(ids.ok());
  EXPECT_GT(ids->size(), 256u);
}

TEST(SyntheticTokenizerTest, DecoderEmitsWholeCharacters) {
  SyntheticTokenizer t(0);
  auto d = t.NewStreamDecoder();
  std::string text;
  for (int32_t id = 0; id < SyntheticTokenizer::VocabularySize(); ++id) text += d->Next(id);
  text += d->Flush();
  EXPECT_NE(text.find("日本語"), std::string::npos);
}

}  // namespace
}  // namespace tandem::workers
