#include "workers/generation_request.h"

#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "workers/simulator/synthetic_engine.h"
#include "workers/simulator/synthetic_profile.h"
#include "workers/vision/image_preprocessor.h"

namespace tandem::workers {
namespace {

using tandem::v1::WorkerGenerateRequest;
using ::testing::HasSubstr;

WorkerGenerateRequest Request(const std::string& text) {
  WorkerGenerateRequest r;
  r.set_request_id("req-1");
  auto* m = r.add_messages();
  m->set_role("user");
  m->add_content()->set_text(text);
  return r;
}

// The header of a `width` x `height` GIF with a two-colour table: all that the image checks
// before decoding read.
std::string GifHeader(int width, int height) {
  std::string gif = "GIF89a";
  for (int side : {width, height}) {
    gif.push_back(static_cast<char>(side & 0xff));
    gif.push_back(static_cast<char>(side >> 8));
  }
  gif += std::string("\x80\0\0", 3);            // a global colour table of 2 entries
  gif += std::string("\0\0\0\xff\xff\xff", 6);  // black, white
  gif.push_back(';');                           // trailer
  return gif;
}

void AddGif(WorkerGenerateRequest* r, int width, int height) {
  auto* image = r->mutable_messages(0)->add_content()->mutable_image();
  image->set_data(GifHeader(width, height));
  image->set_mime_type("image/gif");
}

SyntheticEngine Simulator(const std::string& model) {
  return SyntheticEngine(*SyntheticProfileFor(model), SyntheticEngineOptions{0, 8}, Clock::Real());
}

// A prompt of 3 tokens plus each image's.
class CountingTokenizer final : public Tokenizer {
 public:
  absl::StatusOr<std::vector<int32_t>> EncodeChat(
      const google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage>&,
      const tandem::v1::ReasoningOptions&, bool) const override {
    return std::vector<int32_t>{1, 2, 3};
  }
  absl::StatusOr<std::vector<int32_t>> EncodeChatWithImages(
      const google::protobuf::RepeatedPtrField<tandem::v1::ChatMessage>&,
      const google::protobuf::RepeatedPtrField<tandem::v1::Tool>&,
      const tandem::v1::ReasoningOptions&, bool,
      absl::Span<const int64_t> image_tokens) const override {
    return std::vector<int32_t>(
        3 + std::accumulate(image_tokens.begin(), image_tokens.end(), int64_t{0}), 7);
  }
  std::unique_ptr<StreamDecoder> NewStreamDecoder() const override { return nullptr; }
};

// An engine with an image processor (as the native vision engine): its images are decoded by
// the worker, after ToGenerationRequest.
class VisionEngine final : public Engine {
 public:
  VisionEngine() {
    info_.model_name = "qwen";
    info_.vision = true;
    info_.max_context_tokens = 4096;
    info_.max_output_tokens = 64;
  }
  const EngineInfo& Info() const override { return info_; }
  const Tokenizer& GetTokenizer() const override { return tokenizer_; }
  absl::Status AddSequence(const SequenceSpec&) override { return absl::OkStatus(); }
  void RemoveSequence(uint64_t) override {}
  absl::Status Step(absl::Span<const uint64_t>, std::vector<StepOutput>*) override {
    return absl::OkStatus();
  }
  const vision::PreprocessorConfig* ImageProcessor() const override { return &processor_; }

 private:
  EngineInfo info_;
  CountingTokenizer tokenizer_;
  vision::PreprocessorConfig processor_;
};

TEST(ToGenerationRequestTest, AValidRequestGivesItsPromptSamplingAndBudgets) {
  SyntheticEngine engine = Simulator("qwen");
  WorkerGenerateRequest r = Request("hello there");
  auto* s = r.mutable_sampling();
  s->set_temperature(0.5f);
  s->set_top_p(0.9f);
  s->set_top_k(5);
  s->set_seed(42);
  s->set_max_tokens(16);
  s->add_stop("END");
  r.mutable_reasoning()->set_mode(tandem::v1::REASONING_MODE_ON);
  r.mutable_reasoning()->set_thinking_budget_tokens(100);

  absl::StatusOr<PlannedGeneration> planned = ToGenerationRequest(r, engine, RequestLimits{});
  ASSERT_TRUE(planned.ok()) << planned.status();
  const GenerationRequest& g = planned->request;
  EXPECT_EQ(g.request_id, "req-1");
  auto prompt = engine.GetTokenizer().EncodeChat(r.messages(), r.reasoning());
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(g.prompt, *prompt);
  EXPECT_FLOAT_EQ(g.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(g.sampling.top_p, 0.9f);
  EXPECT_EQ(g.sampling.top_k, 5);
  EXPECT_EQ(g.sampling.seed, 42u);
  EXPECT_EQ(g.max_tokens, 16);
  EXPECT_THAT(g.stop, ::testing::ElementsAre("END"));
  EXPECT_EQ(g.thinking_budget, 100);
  EXPECT_TRUE(g.images.empty());
  EXPECT_TRUE(planned->images.parts.empty());
}

TEST(ToGenerationRequestTest, UnsetSamplingTakesTheDefaultsAndTheModelsOutputLimit) {
  SyntheticEngine engine = Simulator("qwen");
  WorkerGenerateRequest r = Request("hello");
  r.mutable_reasoning()->set_mode(tandem::v1::REASONING_MODE_OFF);
  r.mutable_reasoning()->set_thinking_budget_tokens(100);  // off: no thinking, no budget
  absl::StatusOr<PlannedGeneration> planned = ToGenerationRequest(r, engine, RequestLimits{});
  ASSERT_TRUE(planned.ok()) << planned.status();
  const GenerationRequest& g = planned->request;
  EXPECT_FLOAT_EQ(g.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(g.sampling.top_p, 1.0f);
  EXPECT_EQ(g.sampling.top_k, 0);
  EXPECT_EQ(g.max_tokens, engine.Info().max_output_tokens);
  EXPECT_TRUE(g.stop.empty());
  EXPECT_EQ(g.thinking_budget, 0);
}

TEST(ToGenerationRequestTest, AnInvalidRequestIsInvalidArgumentNamingTheField) {
  SyntheticEngine engine = Simulator("qwen");
  WorkerGenerateRequest r = Request("hello");
  r.mutable_sampling()->set_max_tokens(0);
  absl::StatusOr<PlannedGeneration> planned = ToGenerationRequest(r, engine, RequestLimits{});
  EXPECT_EQ(planned.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(planned.status().message(), "sampling.max_tokens: 0; must be >= 1");

  WorkerGenerateRequest bad_id = Request("hello");
  bad_id.set_request_id("has space");
  planned = ToGenerationRequest(bad_id, engine, RequestLimits{});
  EXPECT_EQ(planned.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(planned.status().message(), HasSubstr("request_id: "));
  // The same checks as the upstream path's, which tokenizes nothing.
  EXPECT_EQ(ValidateGenerateRequest(bad_id, engine.Info().max_output_tokens, RequestLimits{}),
            planned.status());
}

TEST(ToGenerationRequestTest, APromptThatDoesNotFitTheContextIsRefused) {
  SyntheticProfile profile = *SyntheticProfileFor("qwen");
  profile.info.max_context_tokens = 8;
  SyntheticEngine engine(profile, SyntheticEngineOptions{0, 8}, Clock::Real());
  WorkerGenerateRequest r = Request("a prompt of rather more than eight tokens, surely");
  auto prompt = engine.GetTokenizer().EncodeChat(r.messages(), r.reasoning());
  ASSERT_TRUE(prompt.ok());
  absl::StatusOr<PlannedGeneration> planned = ToGenerationRequest(r, engine, RequestLimits{});
  EXPECT_EQ(planned.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(planned.status().message(),
            absl::StrCat("messages: prompt of ", prompt->size(),
                         " tokens does not fit the model's context of 8 tokens"));
}

TEST(ToGenerationRequestTest, TheSimulatorCountsImagesInItsTokenizer) {
  SyntheticEngine engine = Simulator("qwen");
  WorkerGenerateRequest r = Request("what is this?");
  auto text_only = engine.GetTokenizer().EncodeChat(r.messages(), r.reasoning());
  ASSERT_TRUE(text_only.ok());
  AddGif(&r, 64, 64);
  absl::StatusOr<PlannedGeneration> planned = ToGenerationRequest(r, engine, RequestLimits{});
  ASSERT_TRUE(planned.ok()) << planned.status();
  EXPECT_TRUE(planned->images.parts.empty());  // nothing to decode
  EXPECT_EQ(planned->request.prompt.size(),
            text_only->size() + SyntheticProfileFor("qwen")->tokens_per_image);
}

TEST(ToGenerationRequestTest, ATextOnlyModelRefusesImages) {
  SyntheticEngine engine = Simulator("nemotron");
  WorkerGenerateRequest r = Request("what is this?");
  AddGif(&r, 64, 64);
  absl::StatusOr<PlannedGeneration> planned = ToGenerationRequest(r, engine, RequestLimits{});
  EXPECT_EQ(planned.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(planned.status().message(),
            "messages[0].content[1].image: model 'nemotron' does not accept images");
}

TEST(ToGenerationRequestTest, AnEngineWithAProcessorGetsItsImagesPlannedNotDecoded) {
  VisionEngine engine;
  WorkerGenerateRequest r = Request("what is this?");
  AddGif(&r, 64, 48);
  absl::StatusOr<PlannedGeneration> planned = ToGenerationRequest(r, engine, RequestLimits{});
  ASSERT_TRUE(planned.ok()) << planned.status();
  auto grid = vision::GridOf(48, 64, *engine.ImageProcessor());
  ASSERT_TRUE(grid.ok());
  ASSERT_EQ(planned->images.parts.size(), 1u);
  const ImagePlan::Part& part = planned->images.parts[0];
  EXPECT_EQ(part.message, 0);
  EXPECT_EQ(part.content, 1);
  EXPECT_EQ(part.width, 64);
  EXPECT_EQ(part.height, 48);
  EXPECT_EQ(part.tokens, grid->num_tokens);
  EXPECT_EQ(planned->images.total_tokens, grid->num_tokens);
  // The prompt holds the image's tokens already; its pixels come later, on the image pool.
  EXPECT_EQ(static_cast<int64_t>(planned->request.prompt.size()), 3 + grid->num_tokens);
  EXPECT_TRUE(planned->request.images.empty());
}

TEST(ToGenerationRequestTest, AnImageOverThePixelLimitIsRefusedFromItsHeader) {
  VisionEngine engine;
  WorkerGenerateRequest r = Request("what is this?");
  AddGif(&r, 64, 64);
  RequestLimits limits;
  limits.max_image_pixels = 1000;
  absl::StatusOr<PlannedGeneration> planned = ToGenerationRequest(r, engine, limits);
  EXPECT_EQ(planned.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(planned.status().message(),
            "messages[0].content[1].image: image is 64x64 (4096 pixels), over the limit of 1000 "
            "pixels");
}

}  // namespace
}  // namespace tandem::workers
