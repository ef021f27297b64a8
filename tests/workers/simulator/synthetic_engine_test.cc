#include "workers/simulator/synthetic_engine.h"

#include <chrono>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/steady_wait.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "workers/scheduler.h"

namespace tandem::workers {
namespace {

using Messages = google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage>;

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

TEST(SyntheticTokenizerTest, AContinuationOfItsOwnWordsIsTheFreshPromptThenTheWords) {
  SyntheticTokenizer t(0);
  tandem::v1::ReasoningOptions r;
  Messages m;
  auto* user = m.Add();
  user->set_role("user");
  user->add_content()->set_text("hi there");
  const auto fresh = t.EncodeChat(m, r);
  ASSERT_TRUE(fresh.ok());
  SyntheticTokenizer::Continuation c = SyntheticTokenizer::ParseContinuation(*fresh);
  EXPECT_EQ(c.stream_prefix, fresh->size());
  EXPECT_EQ(c.resume_at, 0);
  EXPECT_FALSE(c.leading_space);

  auto* partial = m.Add();
  partial->set_role("assistant");
  partial->add_content()->set_text("the café 日本語");
  const auto resumed = t.EncodeChat(m, r, /*continue_final=*/true);
  ASSERT_TRUE(resumed.ok());
  c = SyntheticTokenizer::ParseContinuation(*resumed);
  EXPECT_EQ(c.stream_prefix, fresh->size());
  EXPECT_TRUE(std::equal(fresh->begin(), fresh->end(), resumed->begin()));
  EXPECT_EQ(c.resume_at, 3);
  EXPECT_TRUE(c.leading_space);

  // Other text is left open as text: a stream of its own, joined with a space after a word.
  partial->mutable_content(0)->set_text("Once upon a time");
  auto other = t.EncodeChat(m, r, true);
  ASSERT_TRUE(other.ok());
  c = SyntheticTokenizer::ParseContinuation(*other);
  EXPECT_EQ(c.stream_prefix, other->size());
  EXPECT_EQ(c.resume_at, 0);
  EXPECT_TRUE(c.leading_space);
  partial->mutable_content(0)->set_text("Once upon a ");
  other = t.EncodeChat(m, r, true);
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(SyntheticTokenizer::ParseContinuation(*other).leading_space);
  // Two spaces between words is not how the simulator writes: not a resume.
  partial->mutable_content(0)->set_text("the  café");
  other = t.EncodeChat(m, r, true);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(SyntheticTokenizer::ParseContinuation(*other).resume_at, 0);
}

TEST(SyntheticTokenizerTest, OnlyAContinuationsDecoderStartsWithASpace) {
  SyntheticTokenizer t(0);
  const std::vector<int32_t> plain = {1000, 901, 901};
  EXPECT_EQ(t.NewStreamDecoderAfter(plain)->Next(0), "the");
  EXPECT_EQ(t.NewStreamDecoder()->Next(0), "the");
  Messages m;
  auto* user = m.Add();
  user->set_role("user");
  user->add_content()->set_text("hi");
  auto* partial = m.Add();
  partial->set_role("assistant");
  partial->add_content()->set_text("the");
  const auto prompt = t.EncodeChat(m, {}, true);
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(t.NewStreamDecoderAfter(*prompt)->Next(0), " the");
}

// One answer as the worker streams it: the text of each OnText call with a token (a flush's
// text joins the last piece), as the gateway relays it.
struct Answer {
  std::vector<std::string> pieces;
  absl::Status status;
  tandem::v1::FinishReason reason = tandem::v1::FINISH_REASON_UNSPECIFIED;
  int32_t completion_tokens = 0;

  std::string Text(size_t first_pieces) const {
    std::string text;
    for (size_t i = 0; i < first_pieces && i < pieces.size(); ++i) text += pieces[i];
    return text;
  }
  std::string Text() const { return Text(pieces.size()); }
};

class AnswerSink final : public GenerationSink {
 public:
  void OnStarted(int32_t, int32_t, double) override {}
  void OnText(std::string_view text, int32_t tokens) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    if (tokens > 0 || answer_.pieces.empty()) answer_.pieces.emplace_back();
    answer_.pieces.back() += text;
  }
  void OnFinished(const absl::Status& status, tandem::v1::FinishReason reason,
                  int32_t completion_tokens) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    answer_.status = status;
    answer_.reason = reason;
    answer_.completion_tokens = completion_tokens;
    done_ = true;
    cv_.SignalAll();
  }
  Answer Wait() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!done_ && WaitUntil(cv_, mu_, deadline)) {
    }
    EXPECT_TRUE(done_);
    return answer_;
  }

 private:
  absl::Mutex mu_;
  absl::CondVar cv_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  Answer answer_ ABSL_GUARDED_BY(mu_);
};

// The worker's path: EncodeChat, then the scheduler driving the synthetic engine.
class SyntheticContinuationTest : public ::testing::Test {
 protected:
  void Start(int32_t output_tokens) {
    SyntheticEngineOptions o;
    o.time_scale = 0;
    o.output_tokens = output_tokens;
    engine_ = std::make_unique<SyntheticEngine>(*SyntheticProfileFor("qwen"), o, Clock::Real());
    metrics_ = std::make_unique<WorkerMetrics>(
        registry_, WorkerMetrics::Labels{"qwen", "id", "synthetic", "cpu", "cpu"});
    scheduler_ = std::make_unique<Scheduler>(engine_.get(), metrics_.get(), Clock::Real(),
                                             Scheduler::Options{8, 8});
    scheduler_->Start();
  }
  void TearDown() override {
    if (scheduler_) scheduler_->Stop();
  }

  Answer Generate(const Messages& messages, const tandem::v1::ReasoningOptions& reasoning,
                  bool continue_final, int32_t max_tokens, SamplingConfig sampling) {
    auto prompt = engine_->GetTokenizer().EncodeChat(messages, reasoning, continue_final);
    EXPECT_TRUE(prompt.ok()) << prompt.status();
    if (!prompt.ok()) return {};
    GenerationRequest r;
    r.prompt = *std::move(prompt);
    r.sampling = sampling;
    r.max_tokens = max_tokens;
    r.arrival = Clock::Real()->Now();
    auto sink = std::make_shared<AnswerSink>();
    EXPECT_TRUE(scheduler_->Submit(std::move(r), sink).ok());
    return sink->Wait();
  }

  // What a mid-stream failover sends: the chat, then the partial answer left open.
  static Messages WithPartial(Messages messages, const std::string& partial) {
    auto* m = messages.Add();
    m->set_role("assistant");
    m->add_content()->set_text(partial);
    return messages;
  }

  prometheus::Registry registry_;
  std::unique_ptr<SyntheticEngine> engine_;
  std::unique_ptr<WorkerMetrics> metrics_;
  std::unique_ptr<Scheduler> scheduler_;
};

Messages Chat(const std::string& user_text) {
  Messages m;
  auto* system = m.Add();
  system->set_role("system");
  system->add_content()->set_text("Be brief.");
  auto* user = m.Add();
  user->set_role("user");
  user->add_content()->set_text(user_text);
  return m;
}

bool HasMultiByte(const std::string& s) {
  return std::any_of(s.begin(), s.end(), [](char c) { return (c & 0x80) != 0; });
}

// The answer cut after every k tokens and continued as the gateway's failover does (the text
// relayed so far as an open assistant message, max_tokens less the tokens relayed) is the uncut
// answer: same text, same tokens, same finish.
TEST_F(SyntheticContinuationTest, AnAnswerCutAnywhereAndContinuedIsTheUncutAnswer) {
  Start(/*output_tokens=*/0);  // lengths derived from the prompt, 16 to 511 tokens
  bool cut_after_multibyte = false, cut_before_multibyte = false;
  for (const std::string user : {"tell me a long story", "¿Qué tal? 日本語で答えて"}) {
    for (const auto mode :
         {tandem::v1::REASONING_MODE_UNSPECIFIED, tandem::v1::REASONING_MODE_OFF}) {
      for (const float temperature : {0.0f, 0.8f}) {
        SCOPED_TRACE(absl::StrCat(user, " mode ", mode, " temperature ", temperature));
        tandem::v1::ReasoningOptions reasoning;
        reasoning.set_mode(mode);
        SamplingConfig sampling;
        sampling.temperature = temperature;
        sampling.seed = 42;
        const Messages chat = Chat(user);
        // max_tokens 24 ends most by length; 600 lets every answer run to its own end.
        for (const int32_t max_tokens : {24, 600}) {
          const Answer fresh = Generate(chat, reasoning, false, max_tokens, sampling);
          ASSERT_TRUE(fresh.status.ok()) << fresh.status;
          ASSERT_GE(fresh.completion_tokens, 16);
          ASSERT_EQ(fresh.pieces.size(), static_cast<size_t>(fresh.completion_tokens));
          const std::string want = fresh.Text();
          std::vector<int32_t> cuts;
          for (int32_t k = 0; k < fresh.completion_tokens; ++k) {
            if (max_tokens < 100 || k < 4 || k + 4 > fresh.completion_tokens || k % 37 == 0) {
              cuts.push_back(k);
            }
          }
          for (const int32_t k : cuts) {
            const std::string relayed = fresh.Text(k);
            const Answer rest =
                Generate(WithPartial(chat, relayed), reasoning, true, max_tokens - k, sampling);
            ASSERT_TRUE(rest.status.ok()) << rest.status;
            EXPECT_EQ(relayed + rest.Text(), want) << "cut after " << k << " tokens";
            EXPECT_EQ(k + rest.completion_tokens, fresh.completion_tokens) << k;
            EXPECT_EQ(rest.reason, fresh.reason) << k;
            if (k > 0 && HasMultiByte(fresh.pieces[k - 1])) cut_after_multibyte = true;
            if (HasMultiByte(fresh.pieces[k])) cut_before_multibyte = true;
          }
        }
      }
    }
  }
  // The cuts met words such as "café" and "日本語" on both sides.
  EXPECT_TRUE(cut_after_multibyte);
  EXPECT_TRUE(cut_before_multibyte);
}

// The soak's set-up: answers longer than max_tokens, so every answer ends by length.
TEST_F(SyntheticContinuationTest, WithAFixedLengthAContinuationStillEndsAtMaxTokens) {
  Start(/*output_tokens=*/128);
  const Messages chat = Chat("Summarize: the cat sat on a mat");
  SamplingConfig greedy;
  greedy.temperature = 0;
  const Answer fresh = Generate(chat, {}, false, 32, greedy);
  ASSERT_EQ(fresh.completion_tokens, 32);
  EXPECT_EQ(fresh.reason, tandem::v1::FINISH_REASON_LENGTH);
  for (const int32_t k : {1, 7, 31}) {
    const Answer rest = Generate(WithPartial(chat, fresh.Text(k)), {}, true, 32 - k, greedy);
    EXPECT_EQ(fresh.Text(k) + rest.Text(), fresh.Text()) << k;
    EXPECT_EQ(rest.completion_tokens, 32 - k);
    EXPECT_EQ(rest.reason, tandem::v1::FINISH_REASON_LENGTH);
  }
}

TEST_F(SyntheticContinuationTest, OtherOpenTextIsContinuedWithASpaceAfterAWord) {
  Start(/*output_tokens=*/8);
  SamplingConfig greedy;
  greedy.temperature = 0;
  const Answer a = Generate(WithPartial(Chat("hi"), "Once upon a time"), {}, true, 8, greedy);
  ASSERT_EQ(a.completion_tokens, 8);
  EXPECT_EQ(a.Text().front(), ' ') << a.Text();
  EXPECT_EQ(Generate(WithPartial(Chat("hi"), "Once upon a time"), {}, true, 8, greedy).Text(),
            a.Text());
  const Answer b = Generate(WithPartial(Chat("hi"), "Once upon a "), {}, true, 8, greedy);
  ASSERT_EQ(b.completion_tokens, 8);
  EXPECT_NE(b.Text().front(), ' ') << b.Text();
}

}  // namespace
}  // namespace tandem::workers
