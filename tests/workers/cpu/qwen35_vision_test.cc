// The fp32 Qwen3.5 vision path against tests/golden/qwen3_5_moe_vl (MANIFEST.md there says how
// it was made and which tolerances an fp32 engine should meet): the vision tower at every stage,
// the 3-D rotary positions, the image embeddings scattered into the prompt, prefill logits and
// greedy continuations.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/golden_files.h"
#include "tests/support/numerics.h"
#include "tests/support/test_paths.h"
#include "workers/cpu/cpu_model.h"
#include "workers/cpu/qwen35_vision_model.h"
#include "workers/model/model_config.h"
#include "workers/model/mrope_positions.h"
#include "workers/model/safetensors.h"
#include "workers/vision/image_decoder.h"
#include "workers/vision/image_preprocessor.h"

namespace tandem::workers::cpu::vision_golden {
namespace {

using tandem::testing::Argmax;
using tandem::testing::MaxAbsDiff;
using Json = nlohmann::json;

const std::string kGoldenDir = tandem::testing::SourcePath("/tests/golden/qwen3_5_moe_vl");
// MANIFEST.md "Suggested tolerances (fp32 engine)".
constexpr float kVisionTolerance = 2e-5f;
constexpr float kTextOnlyLogitTolerance = 1e-4f;
constexpr float kImageLogitTolerance = 2e-4f;

class QwenVisionGoldenTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto checkpoint = model::Checkpoint::Open(kGoldenDir);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    checkpoint_ = checkpoint->release();
    auto config = model::ParseModelConfigText(checkpoint_->config_json(), kGoldenDir);
    ASSERT_TRUE(config.ok()) << config.status();
    ASSERT_TRUE(config->vision.has_value());
    vision_config_ = new model::qwen35::VisionConfig(*config->vision);
    ASSERT_TRUE(Qwen35VisionModel::CheckpointHasEncoder(*checkpoint_));
    auto vision = Qwen35VisionModel::Load(*checkpoint_, *config->vision);
    ASSERT_TRUE(vision.ok()) << vision.status();
    vision_ = vision->release();
    auto text = LoadCpuModel(*checkpoint_, *config);
    ASSERT_TRUE(text.ok()) << text.status();
    text_ = text->release();
    auto tensors =
        model::SafetensorsFile::Open(std::string(kGoldenDir) + "/case_tensors.safetensors");
    ASSERT_TRUE(tensors.ok()) << tensors.status();
    tensors_ = tensors->release();
    cases_ = new Json(testing::ReadJsonFile(std::string(kGoldenDir) + "/cases.json"));
    ASSERT_TRUE(cases_->is_object());
  }
  static void TearDownTestSuite() {
    delete vision_;
    delete text_;
    delete tensors_;
    delete checkpoint_;
    delete cases_;
    delete vision_config_;
  }
  void SetUp() override {
    if (vision_ == nullptr || text_ == nullptr || tensors_ == nullptr || cases_ == nullptr) {
      GTEST_SKIP() << "golden model failed to load";
    }
  }

  static std::vector<float> Tensor(const std::string& name) {
    auto it = tensors_->tensors().find(name);
    if (it == tensors_->tensors().end()) {
      ADD_FAILURE() << "no tensor " << name;
      return {};
    }
    return it->second.ToFloat();
  }
  static const Json& Image(const std::string& name) { return (*cases_)["images"][name]; }
  static VisionGrid GridOf(const Json& thw) {
    return VisionGrid{thw[0].get<int64_t>(), thw[1].get<int64_t>(), thw[2].get<int64_t>()};
  }
  static const Json& Case(const std::string& name) {
    for (const Json& c : (*cases_)["cases"]) {
      if (c["name"] == name) return c;
    }
    ADD_FAILURE() << "no case " << name;
    return (*cases_)["cases"][0];
  }
  // The case's image embeddings from the encoder, images concatenated in prompt order.
  static std::vector<float> EncodeCase(const Json& c, std::vector<model::MergedGrid>* grids) {
    std::vector<float> pixels;
    std::vector<VisionGrid> vision_grids;
    for (const Json& name : c["images"]) {
      const std::vector<float> p = Tensor("image." + name.get<std::string>() + ".pixel_values");
      pixels.insert(pixels.end(), p.begin(), p.end());
      const VisionGrid g = GridOf(Image(name.get<std::string>())["grid_thw"]);
      vision_grids.push_back(g);
      const int64_t m = vision_config_->spatial_merge_size;
      grids->push_back(model::MergedGrid{g.h / m, g.w / m});
    }
    auto embeds = vision_->Encode(pixels, vision_grids);
    EXPECT_TRUE(embeds.ok()) << embeds.status();
    return embeds.ok() ? *embeds : std::vector<float>();
  }

  static model::Checkpoint* checkpoint_;
  static model::qwen35::VisionConfig* vision_config_;
  static Qwen35VisionModel* vision_;
  static CpuModel* text_;
  static model::SafetensorsFile* tensors_;
  static Json* cases_;
};

model::Checkpoint* QwenVisionGoldenTest::checkpoint_ = nullptr;
model::qwen35::VisionConfig* QwenVisionGoldenTest::vision_config_ = nullptr;
Qwen35VisionModel* QwenVisionGoldenTest::vision_ = nullptr;
CpuModel* QwenVisionGoldenTest::text_ = nullptr;
model::SafetensorsFile* QwenVisionGoldenTest::tensors_ = nullptr;
Json* QwenVisionGoldenTest::cases_ = nullptr;

TEST_F(QwenVisionGoldenTest, ConfigMatchesTheReleasedLayout) {
  EXPECT_EQ(vision_config_->depth, 2);
  EXPECT_EQ(vision_config_->hidden_size, 32);
  EXPECT_EQ(vision_config_->head_dim(), 16);
  EXPECT_EQ(vision_config_->patch_dim(), 1536);
  EXPECT_EQ(vision_config_->position_side(), 8);
  EXPECT_EQ(vision_config_->image_token_id, 56);
  EXPECT_EQ(vision_config_->vision_start_token_id, 53);
  EXPECT_EQ(vision_config_->vision_end_token_id, 54);
  EXPECT_TRUE(vision_config_->tanh_gelu);
}

TEST_F(QwenVisionGoldenTest, EveryEncoderStageMatchesGolden) {
  for (const std::string name : {"a_wide", "a_small"}) {
    SCOPED_TRACE(name);
    const Json& image = Image(name);
    VisionTrace trace;
    auto embeds = vision_->Encode(Tensor("image." + name + ".pixel_values"),
                                  {GridOf(image["grid_thw"])}, &trace);
    ASSERT_TRUE(embeds.ok()) << embeds.status();
    const std::string v = "image." + name + ".vision.";
    std::printf("%s: image embeddings max |error| %.3g\n", name.c_str(),
                MaxAbsDiff(*embeds, Tensor(v + "merged")));
    EXPECT_LE(MaxAbsDiff(trace.patch_embed, Tensor(v + "patch_embed")), kVisionTolerance);
    EXPECT_LE(MaxAbsDiff(trace.pos_embeds, Tensor(v + "pos_embeds")), kVisionTolerance);
    EXPECT_LE(MaxAbsDiff(trace.after_pos_embed, Tensor(v + "after_pos_embed")), kVisionTolerance);
    ASSERT_EQ(trace.blocks.size(), 2u);
    EXPECT_LE(MaxAbsDiff(trace.blocks[0], Tensor(v + "block0")), kVisionTolerance);
    EXPECT_LE(MaxAbsDiff(trace.blocks[1], Tensor(v + "block1")), kVisionTolerance);
    EXPECT_LE(MaxAbsDiff(trace.merger_norm, Tensor(v + "merger_norm")), kVisionTolerance);
    EXPECT_LE(MaxAbsDiff(*embeds, Tensor(v + "merged")), kVisionTolerance);
    std::vector<float> json_embeds;
    for (const Json& row : image["vision"]["image_embeds"]) {
      for (const Json& x : row) json_embeds.push_back(x.get<float>());
    }
    EXPECT_LE(MaxAbsDiff(*embeds, json_embeds), kVisionTolerance);
  }
}

TEST_F(QwenVisionGoldenTest, TwoImagesInOneCallEqualSeparateCalls) {
  const std::vector<float> wide = Tensor("image.a_wide.pixel_values");
  const std::vector<float> small = Tensor("image.a_small.pixel_values");
  const VisionGrid gw = GridOf(Image("a_wide")["grid_thw"]);
  const VisionGrid gs = GridOf(Image("a_small")["grid_thw"]);
  std::vector<float> both = wide;
  both.insert(both.end(), small.begin(), small.end());
  auto joint = vision_->Encode(both, {gw, gs});
  auto a = vision_->Encode(wide, {gw});
  auto b = vision_->Encode(small, {gs});
  ASSERT_TRUE(joint.ok() && a.ok() && b.ok());
  std::vector<float> separate = *a;
  separate.insert(separate.end(), b->begin(), b->end());
  // Images never attend to each other, so only the linear layers' row count differs, and BLAS
  // may sum in another order for another M (OpenBLAS's kernels on an AMD EPYC do: 1.1e-6 at
  // most; on earlier Intel hosts the bits were equal). Attention across images would move
  // embeddings of magnitude ~1 by far more.
  ASSERT_EQ(joint->size(), separate.size());
  EXPECT_LE(MaxAbsDiff(*joint, separate), 1e-5f);
}

TEST_F(QwenVisionGoldenTest, BadGridsAreInvalidArgument) {
  const std::vector<float> wide = Tensor("image.a_wide.pixel_values");
  EXPECT_EQ(vision_->Encode(wide, {VisionGrid{1, 11, 24}}).status().code(),
            absl::StatusCode::kInvalidArgument);  // 11 rows: not a multiple of the merge size
  EXPECT_EQ(vision_->Encode(wide, {VisionGrid{1, 12, 24}}).status().code(),
            absl::StatusCode::kInvalidArgument);  // more patches than pixel rows
  EXPECT_EQ(vision_->Encode({}, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(QwenVisionGoldenTest, MropePositionsMatchGolden) {
  for (const Json& c : (*cases_)["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    std::vector<model::MergedGrid> grids;
    for (const Json& name : c.value("images", Json::array())) {
      const Json& hw = Image(name.get<std::string>())["llm_grid_hw"];
      grids.push_back(model::MergedGrid{hw[0].get<int64_t>(), hw[1].get<int64_t>()});
    }
    const std::vector<int32_t> ids = testing::JsonInts(c["prompt_ids"]);
    auto p = model::ComputeMropePositions(ids, vision_config_->image_token_id, grids);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->rope_delta, c["rope_delta"].get<int64_t>());
    const Json& expected = c["mrope_position_ids"];
    EXPECT_EQ(p->t, expected[0].get<std::vector<int64_t>>());
    EXPECT_EQ(p->h, expected[1].get<std::vector<int64_t>>());
    EXPECT_EQ(p->w, expected[2].get<std::vector<int64_t>>());
  }
}

TEST_F(QwenVisionGoldenTest, MropeRefusesTokensThatDoNotMatchTheImages) {
  const int32_t img = vision_config_->image_token_id;
  const std::vector<int32_t> four = {1, img, img, img, img, 2};
  EXPECT_TRUE(model::ComputeMropePositions(four, img, {{2, 2}}).ok());
  EXPECT_FALSE(model::ComputeMropePositions(four, img, {{2, 3}}).ok());    // too few tokens
  EXPECT_FALSE(model::ComputeMropePositions(four, img, {}).ok());          // no image given
  EXPECT_FALSE(model::ComputeMropePositions(four, img, {{1, 2}}).ok());    // tokens left over
  EXPECT_FALSE(model::ComputeMropePositions({1, 2}, img, {{1, 1}}).ok());  // no image tokens
}

// Prefill of each case from its pixel values: every stored logit row, and the argmax at every
// position (MANIFEST: all prefill margins are >= 1.2e-3); then greedy decode with the stored
// decode logits.
TEST_F(QwenVisionGoldenTest, PrefillAndGreedyMatchGolden) {
  const int64_t V = text_->shape().vocab_size;
  for (const std::string name : {"image_noresize", "image_resize", "two_images"}) {
    SCOPED_TRACE(name);
    const Json& c = Case(name);
    std::vector<model::MergedGrid> grids;
    const std::vector<float> embeds = EncodeCase(c, &grids);
    const std::vector<int32_t> ids = testing::JsonInts(c["prompt_ids"]);
    auto positions = model::ComputeMropePositions(ids, vision_config_->image_token_id, grids);
    ASSERT_TRUE(positions.ok()) << positions.status();
    MultimodalInput input{embeds, vision_config_->image_token_id, &*positions};
    auto state = text_->NewState();
    std::vector<float> logits;
    ASSERT_TRUE(text_->ForwardMultimodal(state.get(), ids, input, true, &logits).ok());
    ASSERT_EQ(logits.size(), ids.size() * V);
    const Json& prefill = c["prefill"];
    const std::vector<int32_t> at = testing::JsonInts(prefill["logits_positions"]);
    float worst = 0;
    for (size_t i = 0; i < at.size(); ++i) {
      const float err = MaxAbsDiff(absl::MakeConstSpan(logits.data() + at[i] * V, V),
                                   testing::JsonFloats(prefill["logits"][i]));
      worst = std::max(worst, err);
      EXPECT_LE(err, kImageLogitTolerance) << "position " << at[i];
    }
    const std::vector<int32_t> argmax = testing::JsonInts(prefill["argmax"]);
    for (size_t t = 0; t < ids.size(); ++t) {
      EXPECT_EQ(Argmax(absl::MakeConstSpan(logits.data() + t * V, V)), argmax[t])
          << "position " << t;
    }
    const Json& greedy = c["greedy"];
    const std::vector<int32_t> expected = testing::JsonInts(greedy["generated_ids"]);
    int32_t next =
        static_cast<int32_t>(Argmax(absl::MakeConstSpan(logits.data() + (ids.size() - 1) * V, V)));
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(next, expected[i]) << "greedy token " << i;
      ASSERT_TRUE(text_->Forward(state.get(), absl::MakeConstSpan(&next, 1), false, &logits).ok());
      const float err = MaxAbsDiff(logits, testing::JsonFloats(greedy["decode_logits"][i]));
      worst = std::max(worst, err);
      EXPECT_LE(err, kImageLogitTolerance) << "decode step " << i;
      next = static_cast<int32_t>(Argmax(absl::MakeConstSpan(logits.data(), V)));
    }
    std::printf("%s: prefill and decode logits max |error| %.3g\n", name.c_str(), worst);
  }
}

// The scattered embeddings are the encoder's rows, and the rest the token table's: checked
// through the golden inputs_embeds by feeding them to the text model's first layer would need
// internals, so the check is end to end: zeroing the image rows must move the logits (the
// MANIFEST's "no scatter" bug size is >= 4), and the stored inputs_embeds' image rows equal the
// encoder output.
TEST_F(QwenVisionGoldenTest, ImageRowsReachTheTextModel) {
  const Json& c = Case("image_noresize");
  std::vector<model::MergedGrid> grids;
  const std::vector<float> embeds = EncodeCase(c, &grids);
  const std::vector<float> inputs = Tensor("case.image_noresize.inputs_embeds");
  const int64_t H = text_->shape().hidden_size;
  const int64_t start = c["image_token_spans"][0]["start"].get<int64_t>();
  EXPECT_LE(MaxAbsDiff(embeds, absl::MakeConstSpan(inputs.data() + start * H, embeds.size())),
            kVisionTolerance);
  const std::vector<int32_t> ids = testing::JsonInts(c["prompt_ids"]);
  auto positions = model::ComputeMropePositions(ids, vision_config_->image_token_id, grids);
  ASSERT_TRUE(positions.ok());
  std::vector<float> with, without;
  auto s1 = text_->NewState();
  auto s2 = text_->NewState();
  const std::vector<float> zeros(embeds.size(), 0.0f);
  ASSERT_TRUE(
      text_->ForwardMultimodal(s1.get(), ids, {embeds, 56, &*positions}, false, &with).ok());
  ASSERT_TRUE(
      text_->ForwardMultimodal(s2.get(), ids, {zeros, 56, &*positions}, false, &without).ok());
  EXPECT_GT(MaxAbsDiff(with, without), 1.0f);
}

TEST_F(QwenVisionGoldenTest, MismatchedEmbeddingsAreInvalidArgument) {
  const Json& c = Case("image_noresize");
  const std::vector<int32_t> ids = testing::JsonInts(c["prompt_ids"]);
  std::vector<model::MergedGrid> grids = {{6, 11}};
  auto positions = model::ComputeMropePositions(ids, 56, grids);
  ASSERT_TRUE(positions.ok());
  const std::vector<float> short_embeds(10 * text_->shape().hidden_size, 0.0f);
  auto state = text_->NewState();
  std::vector<float> logits;
  EXPECT_EQ(
      text_->ForwardMultimodal(state.get(), ids, {short_embeds, 56, &*positions}, false, &logits)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(text_->ForwardMultimodal(state.get(), ids, {short_embeds, 56, nullptr}, false, &logits)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// The whole path from the encoded files: PNG decoding, the processor (a_small is resized), the
// encoder and the text model, to the greedy tokens of both single-image cases.
TEST_F(QwenVisionGoldenTest, FromPngFilesToGreedyTokens) {
  const int64_t V = text_->shape().vocab_size;
  for (const auto& [case_name, image_name] : std::vector<std::pair<std::string, std::string>>{
           {"image_noresize", "a_wide"}, {"image_resize", "a_small"}}) {
    SCOPED_TRACE(case_name);
    const Json& image = Image(image_name);
    const std::string png =
        testing::ReadFileText(std::string(kGoldenDir) + "/" + image["png"].get<std::string>());
    auto rgb = vision::DecodeImage(png, "image/png", vision::ImageDecodeLimits{});
    ASSERT_TRUE(rgb.ok()) << rgb.status();
    auto config = vision::ParsePreprocessorConfig(
        testing::ReadJsonFile(std::string(kGoldenDir) + "/preprocessor_config.json"));
    ASSERT_TRUE(config.ok()) << config.status();
    auto prepared = vision::PrepareImage(std::move(*rgb), *config);
    ASSERT_TRUE(prepared.ok()) << prepared.status();
    const std::vector<float> pixels = vision::PixelValues(*prepared, *config);
    EXPECT_EQ(pixels, Tensor("image." + image_name + ".pixel_values"));
    const VisionGrid grid{prepared->grid_t, prepared->grid_h, prepared->grid_w};
    auto embeds = vision_->Encode(pixels, {grid});
    ASSERT_TRUE(embeds.ok()) << embeds.status();
    const Json& c = Case(case_name);
    const std::vector<int32_t> ids = testing::JsonInts(c["prompt_ids"]);
    const std::vector<model::MergedGrid> merged = {{grid.h / 2, grid.w / 2}};
    auto positions = model::ComputeMropePositions(ids, vision_config_->image_token_id, merged);
    ASSERT_TRUE(positions.ok()) << positions.status();
    auto state = text_->NewState();
    std::vector<float> logits;
    ASSERT_TRUE(text_
                    ->ForwardMultimodal(state.get(), ids,
                                        {*embeds, vision_config_->image_token_id, &*positions},
                                        false, &logits)
                    .ok());
    std::vector<int32_t> generated;
    for (int i = 0; i < 8; ++i) {
      const int32_t next = static_cast<int32_t>(Argmax(absl::MakeConstSpan(logits.data(), V)));
      generated.push_back(next);
      ASSERT_TRUE(text_->Forward(state.get(), absl::MakeConstSpan(&next, 1), false, &logits).ok());
    }
    EXPECT_EQ(generated, testing::JsonInts(c["greedy"]["generated_ids"]));
  }
}

TEST_F(QwenVisionGoldenTest, TextOnlyCaseIsUnchanged) {
  const Json& c = Case("text_only_len7");
  const int64_t V = text_->shape().vocab_size;
  const std::vector<int32_t> ids = testing::JsonInts(c["prompt_ids"]);
  auto state = text_->NewState();
  std::vector<float> logits;
  ASSERT_TRUE(text_->Forward(state.get(), ids, true, &logits).ok());
  const Json& prefill = c["prefill"];
  const std::vector<int32_t> at = testing::JsonInts(prefill["logits_positions"]);
  for (size_t i = 0; i < at.size(); ++i) {
    EXPECT_LE(MaxAbsDiff(absl::MakeConstSpan(logits.data() + at[i] * V, V),
                         testing::JsonFloats(prefill["logits"][i])),
              kTextOnlyLogitTolerance);
  }
  // The same prompt through the multimodal path with 1-D positions gives the same bits.
  model::MropePositions flat;
  for (size_t t = 0; t < ids.size(); ++t) {
    flat.t.push_back(t);
    flat.h.push_back(t);
    flat.w.push_back(t);
  }
  auto state2 = text_->NewState();
  std::vector<float> logits2;
  ASSERT_TRUE(text_->ForwardMultimodal(state2.get(), ids, {{}, 56, &flat}, true, &logits2).ok());
  EXPECT_EQ(logits, logits2);
}

}  // namespace
}  // namespace tandem::workers::cpu::vision_golden
