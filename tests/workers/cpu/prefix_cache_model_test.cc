// The prefix cache on the golden models of both hybrid architectures (tests/golden): a state
// resumed from a snapshot continues exactly as the state it was copied from, and the CPU engine
// answers the same with the cache on as off, for a repeated prompt, a chat's next turn, prompts
// that share a system prompt, partitions and a cache too small for what it is offered.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tests/support/golden_files.h"
#include "tests/support/test_paths.h"
#include "workers/cpu/cpu_engine.h"
#include "workers/cpu/cpu_model.h"
#include "workers/cpu/qwen35_vision_model.h"
#include "workers/model/model_config.h"
#include "workers/model/safetensors.h"
#include "workers/simulator/synthetic_tokenizer.h"
#include "workers/vision/image_decoder.h"
#include "workers/vision/image_preprocessor.h"

namespace tandem::workers {
namespace {

constexpr int32_t kBlock = 16;

std::unique_ptr<cpu::CpuModel> LoadGolden(const std::string& name) {
  auto ck = model::Checkpoint::Open(tandem::testing::SourcePath("/tests/golden/" + name));
  EXPECT_TRUE(ck.ok()) << ck.status();
  if (!ck.ok()) return nullptr;
  auto model = cpu::LoadCpuModel(**ck);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

std::vector<int32_t> RandomTokens(int n, uint32_t seed, int32_t vocab) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(3, vocab - 1);  // ids below 3 are special there
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (auto& t : out) t = d(rng);
  return out;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

using Images = std::vector<std::shared_ptr<const vision::PreparedImage>>;

// Greedy answer of `n` tokens; `cached` gets the prompt tokens resumed from the cache.
std::vector<int32_t> Answer(CpuEngine& engine, uint64_t id, const std::vector<int32_t>& prompt,
                            int n, int64_t* cached = nullptr, const std::string& partition = "",
                            const Images& images = {}) {
  SequenceSpec spec;
  spec.id = id;
  spec.prompt = prompt;
  spec.sampling.temperature = 0;
  spec.max_tokens = n;
  spec.cache_partition = partition;
  spec.images = images;
  EXPECT_TRUE(engine.AddSequence(spec).ok());
  if (cached != nullptr) *cached = engine.CachedPromptTokens(id);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    std::vector<StepOutput> step;
    EXPECT_TRUE(engine.Step({id}, &step).ok());
    if (step.size() != 1) break;
    out.push_back(step[0].token);
  }
  engine.RemoveSequence(id);
  return out;
}

class PrefixCacheModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = LoadGolden(GetParam());
    ASSERT_NE(model_, nullptr);
    vocab_ = model_->shape().vocab_size;
  }

  // A CPU engine over its own copy of the golden model.
  std::unique_ptr<CpuEngine> Engine(int64_t cache_bytes) {
    CpuEngineOptions o;
    o.model_name = GetParam() == "nemotron_h" ? "nemotron" : "qwen";
    o.memory_budget_bytes = 1ll << 30;
    o.prefix_cache_bytes = cache_bytes;
    o.prefix_block_tokens = kBlock;
    // No stop ids: every answer runs its whole length, so answers compare token for token.
    return std::make_unique<CpuEngine>(
        LoadGolden(GetParam()), std::make_unique<SyntheticTokenizer>(0), std::vector<int32_t>{}, o);
  }

  std::unique_ptr<cpu::CpuModel> model_;
  int32_t vocab_ = 0;
};

TEST_P(PrefixCacheModelTest, AResumedCopyContinuesExactlyAsTheOriginal) {
  const std::vector<int32_t> prompt = RandomTokens(70, 1, vocab_);
  const auto all = absl::MakeConstSpan(prompt);
  std::vector<float> whole, resumed, a, b;
  auto full = model_->NewState();
  ASSERT_TRUE(model_->Forward(full.get(), all, /*all_logits=*/true, &whole).ok());

  auto prefix = model_->NewState();
  ASSERT_TRUE(model_->Forward(prefix.get(), all.first(32), false, &a).ok());
  std::unique_ptr<cpu::SequenceState> copy = prefix->Clone();
  EXPECT_EQ(copy->position(), 32);
  EXPECT_EQ(copy->bytes(), prefix->bytes());
  ASSERT_TRUE(model_->Forward(copy.get(), all.subspan(32), true, &resumed).ok());
  // The copy's logits for positions 32..69 are those of the whole prompt: within float noise
  // (a prefill split in two sums in another order), the same argmax.
  const size_t v = static_cast<size_t>(vocab_);
  ASSERT_EQ(resumed.size(), 38 * v);
  double worst = 0;
  for (size_t t = 0; t < 38; ++t) {
    const float* x = &whole[(32 + t) * v];
    const float* y = &resumed[t * v];
    for (size_t i = 0; i < v; ++i) worst = std::max(worst, std::abs(double(x[i]) - y[i]));
  }
  EXPECT_LE(worst, 1e-4) << "largest logit difference";

  // The original, fed the same rest afterwards, still gives the same as its copy did: the
  // copy shares nothing with it.
  ASSERT_TRUE(model_->Forward(prefix.get(), all.subspan(32), true, &b).ok());
  EXPECT_EQ(b, resumed);
}

TEST_P(PrefixCacheModelTest, AnswersAreTheSameWithTheCacheOnAsOff) {
  auto off = Engine(0);
  auto on = Engine(64ll << 20);
  const std::vector<int32_t> system = RandomTokens(3 * kBlock + 5, 2, vocab_);
  const std::vector<int32_t> turn1 = Concat(system, RandomTokens(30, 3, vocab_));

  // First and repeated prompt: the repeat resumes from the prompt's last block boundary.
  int64_t cached = -1;
  const std::vector<int32_t> want1 = Answer(*off, 1, turn1, 40);
  EXPECT_EQ(Answer(*on, 1, turn1, 40, &cached), want1);
  EXPECT_EQ(cached, 0);
  EXPECT_EQ(Answer(*on, 2, turn1, 40, &cached), want1);
  EXPECT_EQ(cached, static_cast<int64_t>(turn1.size()) / kBlock * kBlock);

  // The next turn resends the answer: it resumes from the snapshot taken while decoding it.
  const std::vector<int32_t> turn2 = Concat(Concat(turn1, want1), RandomTokens(7, 4, vocab_));
  EXPECT_EQ(Answer(*on, 3, turn2, 32, &cached), Answer(*off, 3, turn2, 32));
  EXPECT_EQ(cached, static_cast<int64_t>(turn1.size() + want1.size()) / kBlock * kBlock);

  // Other conversations with the same system prompt: the second marks the branch point, the
  // third resumes there.
  const std::vector<int32_t> other1 = Concat(system, RandomTokens(20, 5, vocab_));
  const std::vector<int32_t> other2 = Concat(system, RandomTokens(11, 6, vocab_));
  EXPECT_EQ(Answer(*on, 4, other1, 32, &cached), Answer(*off, 4, other1, 32));
  EXPECT_EQ(cached, 0);
  EXPECT_EQ(Answer(*on, 5, other2, 32, &cached), Answer(*off, 5, other2, 32));
  EXPECT_EQ(cached, static_cast<int64_t>(system.size()) / kBlock * kBlock);

  const PrefixCacheStats stats = on->PrefixStats();
  EXPECT_EQ(stats.hits, 3);
  EXPECT_EQ(stats.misses, 2);
  EXPECT_GT(stats.bytes, 0);
}

TEST_P(PrefixCacheModelTest, APartitionMatchesOnlyItsOwnPrompts) {
  auto on = Engine(64ll << 20);
  const std::vector<int32_t> prompt = RandomTokens(4 * kBlock + 3, 7, vocab_);
  int64_t cached = -1;
  const std::vector<int32_t> a = Answer(*on, 1, prompt, 8, &cached, "tenant-a");
  EXPECT_EQ(Answer(*on, 2, prompt, 8, &cached, "tenant-b"), a);
  EXPECT_EQ(cached, 0);
  EXPECT_EQ(Answer(*on, 3, prompt, 8, &cached, "tenant-a"), a);
  EXPECT_GT(cached, 0);
}

TEST_P(PrefixCacheModelTest, ACacheTooSmallForItsSnapshotsNeverChangesAnAnswer) {
  auto off = Engine(0);
  // Room for about one snapshot: every new one evicts the one before.
  auto probe = model_->NewState();
  std::vector<float> logits;
  const std::vector<int32_t> sizing = RandomTokens(4 * kBlock, 8, vocab_);
  ASSERT_TRUE(model_->Forward(probe.get(), sizing, false, &logits).ok());
  auto on = Engine(probe->bytes() * 3 / 2);
  std::vector<std::vector<int32_t>> prompts;
  for (uint32_t i = 0; i < 6; ++i) {
    prompts.push_back(RandomTokens(static_cast<int>(2 * kBlock + 5 * i), 10 + i % 3, vocab_));
  }
  for (uint64_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(Answer(*on, i, prompts[i], 24), Answer(*off, i, prompts[i], 24)) << i;
  }
  const PrefixCacheStats stats = on->PrefixStats();
  EXPECT_GT(stats.evictions, 0);
  EXPECT_LE(stats.bytes, probe->bytes() * 3 / 2);
}

INSTANTIATE_TEST_SUITE_P(Golden, PrefixCacheModelTest,
                         ::testing::Values("qwen3_5_moe", "nemotron_h"));

// The multimodal golden Qwen3.5 with its vision encoder.
std::unique_ptr<CpuEngine> VisionEngine(int64_t cache_bytes) {
  const std::string dir = tandem::testing::SourcePath("/tests/golden/qwen3_5_moe_vl");
  auto ck = model::Checkpoint::Open(dir);
  EXPECT_TRUE(ck.ok()) << ck.status();
  if (!ck.ok()) return nullptr;
  auto config = model::ParseModelConfigText((*ck)->config_json(), dir);
  EXPECT_TRUE(config.ok() && config->vision.has_value());
  auto text = cpu::LoadCpuModel(**ck, *config);
  auto encoder = cpu::Qwen35VisionModel::Load(**ck, *config->vision);
  auto processor = vision::ParsePreprocessorConfig(
      tandem::testing::ReadJsonFile(dir + "/preprocessor_config.json"));
  EXPECT_TRUE(text.ok() && encoder.ok() && processor.ok());
  if (!text.ok() || !encoder.ok() || !processor.ok()) return nullptr;
  CpuEngineOptions o;
  o.model_name = "qwen";
  o.memory_budget_bytes = 1ll << 30;
  o.prefix_cache_bytes = cache_bytes;
  o.prefix_block_tokens = kBlock;
  return std::make_unique<CpuEngine>(std::move(*text), std::make_unique<SyntheticTokenizer>(0),
                                     std::vector<int32_t>{}, o,
                                     CpuVision{std::move(*encoder), *processor});
}

// A golden image case's prompt (its image tokens in place) and the image, prepared.
std::pair<std::vector<int32_t>, Images> ImageCase(const std::string& name, const std::string& png) {
  const std::string dir = tandem::testing::SourcePath("/tests/golden/qwen3_5_moe_vl");
  const auto cases = tandem::testing::ReadJsonFile(dir + "/cases.json");
  std::vector<int32_t> ids;
  for (const auto& c : cases["cases"]) {
    if (c["name"] == name) ids = tandem::testing::JsonInts(c["prompt_ids"]);
  }
  auto processor = vision::ParsePreprocessorConfig(
      tandem::testing::ReadJsonFile(dir + "/preprocessor_config.json"));
  auto rgb = vision::DecodeImage(tandem::testing::ReadFileText(dir + "/" + png), "image/png",
                                 vision::ImageDecodeLimits{});
  EXPECT_TRUE(rgb.ok() && processor.ok());
  auto prepared = vision::PrepareImage(std::move(*rgb), *processor);
  EXPECT_TRUE(prepared.ok()) << prepared.status();
  return {ids, {std::make_shared<const vision::PreparedImage>(std::move(*prepared))}};
}

// Prompts with images share their text before the first image through the cache (and nothing
// after it: their image tokens are the same whatever the picture), with the same answers.
TEST(PrefixCacheVisionTest, TextBeforeAnImageComesFromTheCacheWithTheSameAnswer) {
  auto off = VisionEngine(0);
  auto on = VisionEngine(64ll << 20);
  ASSERT_NE(off, nullptr);
  ASSERT_NE(on, nullptr);
  // A shared instruction of 40 ordinary tokens (ids 100..499: no vision tokens) before each case.
  std::vector<int32_t> instruction;
  for (int i = 0; i < 40; ++i) instruction.push_back(100 + (i * 37) % 400);
  auto [wide_ids, wide] = ImageCase("image_noresize", "a_wide_352x192.png");
  auto [small_ids, small] = ImageCase("image_resize", "a_small_56x40.png");
  ASSERT_FALSE(wide_ids.empty());
  ASSERT_FALSE(small_ids.empty());
  const std::vector<int32_t> first = Concat(instruction, wide_ids);
  const std::vector<int32_t> second = Concat(instruction, small_ids);
  int64_t cached = -1;
  EXPECT_EQ(Answer(*on, 1, first, 12, &cached, "", wide),
            Answer(*off, 1, first, 12, nullptr, "", wide));
  EXPECT_EQ(cached, 0);
  EXPECT_EQ(Answer(*on, 2, second, 12, &cached, "", small),
            Answer(*off, 2, second, 12, nullptr, "", small));
  EXPECT_EQ(cached, 32) << "the instruction's whole blocks, nothing of the image";
  // The first again: its text from the cache, its image encoded again.
  EXPECT_EQ(Answer(*on, 3, first, 12, &cached, "", wide),
            Answer(*off, 3, first, 12, nullptr, "", wide));
  EXPECT_EQ(cached, 32);
  EXPECT_EQ(on->PrefixStats().entries, 1) << "one snapshot: the instruction's blocks";
}

}  // namespace
}  // namespace tandem::workers
