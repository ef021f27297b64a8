// The Qwen3.5 vision path on the device (workers/cuda/cuda_qwen35_vision.h and the CUDA text
// model's image inputs) against tests/golden/qwen3_5_moe_vl: the encoder's every stage on the
// golden pixel_values, two images in one call, the text model's prefill and decode of the image
// cases (image embeddings scattered into the prompt, 3-D mRoPE positions, decode offset by
// rope_delta), the text-only case unchanged, and the full-size encoder's time on a 1024 x 1024
// image with random weights. The host-side patch tables are checked without a device; every
// other test skips without one.
//
// Tolerances. Encoder stages: the golden is fp32; this encoder rounds its GEMM weights and every
// GEMM input (pixels, LayerNorm outputs, attention output, GELU outputs) to BF16, keeping
// biases, LayerNorm parameters and the position table fp32. An fp64 emulation of exactly those
// roundings differs from the golden by at most 0.0096 (block outputs, values up to 3.7), 0.014
// (the merger's BF16 input, values up to 3.7) and 0.0083 (the image embeddings, values up to
// 2.2), relative RMS 0.0018 to 0.0042 per stage. The bounds, 0.05 max abs (1.5% of the value
// scale) and 0.01 relative RMS, leave 2.4x to 5x of room; a wrong rotary angle, position tap or
// attention span gives errors of 0.1 to 1. Logits: the text golden's BF16 bounds
// (tests/gpu/cuda_model_test.cc: 1.5 max abs, 0.5 relative RMS per comparison, 0.15 for the
// median; argmaxes whose fp32 top-2 margin exceeds 0.5 must agree); dropping the image
// embeddings moves these logits by 4.6 or more and 1-D positions by 0.44 to 0.79 (MANIFEST), so
// the per-comparison bounds catch a missing scatter and the median catches wrong positions
// (relative RMS of 1-D positions: about 0.5 and more). Greedy tokens: the first divergence from
// the golden must be at a top-2 margin below 0.15, the margin BF16 rounding was seen to flip on
// the text golden (cuda_model_test.cc); the image cases' margins are 0.043 to 0.49.

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/support/golden_cases.h"
#include "tests/support/golden_files.h"
#include "tests/support/numerics.h"
#include "tests/support/test_paths.h"
#include "workers/cuda/cuda_model.h"
#include "workers/cuda/cuda_qwen35_vision.h"
#include "workers/model/model_config.h"
#include "workers/model/mrope_positions.h"
#include "workers/model/random_checkpoint.h"
#include "workers/model/safetensors.h"

namespace tandem::workers::cuda {
namespace {

using Json = nlohmann::json;
using model::qwen35::VisionConfig;
using testing::Argmax;
using testing::MaxAbsDiff;
using testing::Median;
using testing::RelRms;

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

const std::string kGolden = tandem::testing::SourcePath("/tests/golden/qwen3_5_moe_vl");

// Encoder stages (see the file comment).
constexpr float kStageMaxAbs = 0.05f;
constexpr double kStageRelRms = 0.01;
// Two images in one call against each alone: the same math, but cuBLAS may pick other kernels
// for other row counts, and a last-bit difference can move a BF16 rounding (2^-9 relative).
constexpr float kBatchedMaxAbs = 1e-2f;
// Logits (the text golden's BF16 bounds).
constexpr float kMaxAbs = 1.5f;
constexpr double kMaxRelRms = 0.5;
constexpr double kMedianRelRms = 0.15;
constexpr double kClearMargin = 0.5;
// A greedy token whose fp32 top-2 margin is below this may differ: BF16 rounding in these tiny
// random models flips tokens up to a margin of about 0.15 (cuda_model_test.cc's emulation), and
// the image embeddings add the encoder's BF16 error.
constexpr double kGreedyMargin = 0.15;

bool HaveDevice() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// The numbers of a nested JSON array, row-major.
std::vector<float> Flatten(const Json& j) {
  std::vector<float> out;
  std::function<void(const Json&)> walk = [&](const Json& x) {
    if (x.is_array()) {
      for (const Json& e : x) walk(e);
    } else {
      out.push_back(x.get<float>());
    }
  };
  walk(j);
  return out;
}

model::ModelConfig GoldenConfig() {
  auto c = model::ParseModelConfigText(testing::ReadFileText(std::string(kGolden) + "/config.json"),
                                       kGolden);
  EXPECT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c.ok() && c->vision.has_value());
  return c.ok() ? *c : model::ModelConfig();
}

Json GoldenCases() { return testing::ReadJsonFile(std::string(kGolden) + "/cases.json"); }

VisionGrid GridOf(const Json& grid_thw) {
  return VisionGrid{grid_thw[0].get<int64_t>(), grid_thw[1].get<int64_t>(),
                    grid_thw[2].get<int64_t>()};
}

TEST(VisionPatchTablesTest, MatchTheGoldenPositionsAndInterpolation) {
  const model::ModelConfig config = GoldenConfig();
  ASSERT_TRUE(config.vision.has_value());
  const Json cases = GoldenCases();
  ASSERT_FALSE(cases.is_discarded());
  std::vector<VisionGrid> both;
  for (const char* name : {"a_wide", "a_small"}) {
    const Json& im = cases["images"][name];
    const Json& v = im["vision"];
    const VisionGrid grid = GridOf(im["grid_thw"]);
    both.push_back(grid);
    auto t = BuildVisionPatchTables({grid}, *config.vision);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_EQ(t->patches(), im["num_patches"].get<int64_t>()) << name;
    EXPECT_EQ(t->cu_seqlens, testing::JsonInts(v["cu_seqlens"])) << name;
    EXPECT_EQ(t->max_segment, t->patches());
    float worst = 0;
    for (int64_t n = 0; n < t->patches(); ++n) {
      ASSERT_EQ(t->rows_cols[2 * n], v["rotary_position_ids_hw"][n][0].get<int32_t>()) << n;
      ASSERT_EQ(t->rows_cols[2 * n + 1], v["rotary_position_ids_hw"][n][1].get<int32_t>()) << n;
      for (int k = 0; k < 4; ++k) {
        ASSERT_EQ(t->pos_index[4 * n + k], v["pos_interp_indices"][n][k].get<int32_t>()) << n;
        worst = std::max(worst, std::fabs(t->pos_weight[4 * n + k] -
                                          v["pos_interp_weights"][n][k].get<float>()));
      }
    }
    // fp32 weights either way; a differently ordered expression would still be within 1e-6.
    EXPECT_LE(worst, 1e-6f) << name;
  }
  auto t = BuildVisionPatchTables(both, *config.vision);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->cu_seqlens, (std::vector<int32_t>{0, 264, 544}));
  EXPECT_EQ(t->max_segment, 280);
  EXPECT_FALSE(BuildVisionPatchTables({}, *config.vision).ok());
  EXPECT_FALSE(BuildVisionPatchTables({VisionGrid{1, 3, 4}}, *config.vision).ok());
}

// The golden encoder on the device, and the golden arrays.
class CudaVisionEncoderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
    config_ = GoldenConfig();
    auto ck = model::Checkpoint::Open(kGolden);
    ASSERT_TRUE(ck.ok()) << ck.status();
    checkpoint_ = std::move(*ck);
    ASSERT_TRUE(HasVisionEncoder(*checkpoint_));
    auto e = CudaVisionEncoder::Load(*checkpoint_, *config_.vision);
    ASSERT_TRUE(e.ok()) << e.status();
    encoder_ = std::move(*e);
    ASSERT_TRUE(encoder_->Reserve(1024).ok());
    auto tensors = model::SafetensorsFile::Open(std::string(kGolden) + "/case_tensors.safetensors");
    ASSERT_TRUE(tensors.ok()) << tensors.status();
    tensors_ = std::move(*tensors);
    cases_ = GoldenCases();
    ASSERT_FALSE(cases_.is_discarded());
    CUDA_OK(cudaStreamCreate(&stream_));
    CUDA_OK(cudaMalloc(&out_, sizeof(float) * 1024 * config_.vision->out_hidden_size));
  }
  void TearDown() override {
    if (out_ != nullptr) cudaFree(out_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  std::vector<float> Tensor(const std::string& name) const {
    auto it = tensors_->tensors().find(name);
    EXPECT_NE(it, tensors_->tensors().end()) << name;
    return it == tensors_->tensors().end() ? std::vector<float>() : it->second.ToFloat();
  }

  // Encodes `images` in one call; the output rows, and the trace when asked.
  std::vector<float> Encode(const std::vector<std::string>& images, VisionTrace* trace = nullptr) {
    std::vector<float> pixels;
    std::vector<VisionGrid> grids;
    for (const std::string& name : images) {
      const std::vector<float> p = Tensor("image." + name + ".pixel_values");
      pixels.insert(pixels.end(), p.begin(), p.end());
      grids.push_back(GridOf(cases_["images"][name]["grid_thw"]));
    }
    const absl::Status s = encoder_->Encode(pixels, grids, out_, stream_, trace);
    EXPECT_TRUE(s.ok()) << s;
    std::vector<float> out(encoder_->OutputRows(grids) * config_.vision->out_hidden_size);
    EXPECT_EQ(cudaMemcpy(out.data(), out_, sizeof(float) * out.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return out;
  }

  void ExpectStage(const std::string& image, const std::string& stage,
                   const std::vector<float>& got, const std::vector<float>& want) {
    ASSERT_EQ(got.size(), want.size()) << image << " " << stage;
    const float abs = MaxAbsDiff(got, want);
    const double rel = RelRms(got, want);
    std::printf("[vision %s] %s: max abs %.3g, rel rms %.3g\n", image.c_str(), stage.c_str(), abs,
                rel);
    EXPECT_LE(abs, kStageMaxAbs) << image << " " << stage;
    EXPECT_LE(rel, kStageRelRms) << image << " " << stage;
  }

  model::ModelConfig config_;
  std::unique_ptr<model::Checkpoint> checkpoint_;
  std::unique_ptr<CudaVisionEncoder> encoder_;
  std::unique_ptr<model::SafetensorsFile> tensors_;
  Json cases_;
  cudaStream_t stream_ = nullptr;
  float* out_ = nullptr;
};

TEST_F(CudaVisionEncoderTest, EveryStageMatchesTheGolden) {
  for (const std::string name : {"a_wide", "a_small"}) {
    VisionTrace trace;
    const std::vector<float> out = Encode({name}, &trace);
    const std::string v = "image." + name + ".vision.";
    ExpectStage(name, "patch_embed", trace.patch_embed, Tensor(v + "patch_embed"));
    ExpectStage(name, "after_pos_embed", trace.after_pos_embed, Tensor(v + "after_pos_embed"));
    std::vector<float> pos = trace.after_pos_embed;
    for (size_t i = 0; i < pos.size() && i < trace.patch_embed.size(); ++i) {
      pos[i] -= trace.patch_embed[i];
    }
    ExpectStage(name, "pos_embeds", pos, Tensor(v + "pos_embeds"));
    ASSERT_EQ(trace.blocks.size(), 2u);
    ExpectStage(name, "block0", trace.blocks[0], Tensor(v + "block0"));
    ExpectStage(name, "block1", trace.blocks[1], Tensor(v + "block1"));
    ExpectStage(name, "merger_norm", trace.merger_norm, Tensor(v + "merger_norm"));
    ExpectStage(name, "merged", trace.merged, Tensor(v + "merged"));
    ExpectStage(name, "image_embeds", out,
                Flatten(cases_["images"][name]["vision"]["image_embeds"]));
  }
}

TEST_F(CudaVisionEncoderTest, TwoImagesInOneCallEqualEachAlone) {
  const std::vector<float> wide = Encode({"a_wide"});
  const std::vector<float> small = Encode({"a_small"});
  const std::vector<float> both = Encode({"a_wide", "a_small"});
  std::vector<float> apart = wide;
  apart.insert(apart.end(), small.begin(), small.end());
  const float diff = MaxAbsDiff(both, apart);
  std::printf("[vision] two images in one call vs alone: max abs %.3g\n", diff);
  EXPECT_LE(diff, kBatchedMaxAbs);
  std::vector<float> golden = Tensor("image.a_wide.vision.merged");
  const std::vector<float> g2 = Tensor("image.a_small.vision.merged");
  golden.insert(golden.end(), g2.begin(), g2.end());
  ExpectStage("a_wide+a_small", "merged (one call)", both, golden);
}

TEST_F(CudaVisionEncoderTest, RefusesCallsOutsideItsReservation) {
  const std::vector<float> p = Tensor("image.a_wide.pixel_values");
  const VisionGrid grid = GridOf(cases_["images"]["a_wide"]["grid_thw"]);
  ASSERT_TRUE(encoder_->Reserve(100).ok());
  absl::Status s = encoder_->Encode(p, {grid}, out_, stream_);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  ASSERT_TRUE(encoder_->Reserve(1024).ok());
  s = encoder_->Encode(absl::MakeConstSpan(p).subspan(1), {grid}, out_, stream_);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(encoder_->Encode(p, {grid}, out_, stream_).ok());
  EXPECT_GT(CudaVisionEncoder::ScratchBytes(*config_.vision, 1024),
            CudaVisionEncoder::ScratchBytes(*config_.vision, 100));
}

// The golden text model on the device beside its encoder, with pools for one sequence.
class CudaVisionModelTest : public CudaVisionEncoderTest,
                            public ::testing::WithParamInterface<bool> {
 protected:
  static constexpr int64_t kBlocksPerSeq = 12;  // 192 tokens: the longest case and its decode

  void SetUp() override {
    CudaVisionEncoderTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto m = LoadCudaModel(*checkpoint_, config_);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
    vocab_ = model_->shape().vocab_size;
    CUDA_OK(cudaMalloc(&state_, std::max<int64_t>(model_->state_slot_bytes(), 4)));
    CUDA_OK(cudaMalloc(&kv_, std::max<int64_t>(model_->kv_block_bytes(), 4) * kBlocksPerSeq));
    CUDA_OK(cudaMalloc(&ints_, sizeof(int32_t) * (kBlocksPerSeq + 4)));
    std::vector<int32_t> ids(kBlocksPerSeq);
    for (int64_t i = 0; i < kBlocksPerSeq; ++i) ids[i] = static_cast<int32_t>(i);
    CUDA_OK(cudaMemcpy(ints_, ids.data(), 4 * kBlocksPerSeq, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMalloc(&logits_, sizeof(float) * vocab_));
    ASSERT_TRUE(model_->BindMemory(state_, 1, kv_, kBlocksPerSeq).ok());
  }
  void TearDown() override {
    for (void* p : {state_, kv_, static_cast<void*>(ints_), static_cast<void*>(logits_)}) {
      if (p != nullptr) cudaFree(p);
    }
    CudaVisionEncoderTest::TearDown();
  }

  const Json& Case(const std::string& name) const { return testing::GoldenCase(cases_, name); }

  SequenceSlot Seq() const {
    SequenceSlot s;
    s.state_slot = 0;
    s.block_table = ints_;
    for (int64_t b = 0; b < kBlocksPerSeq; ++b) s.blocks.push_back(static_cast<int32_t>(b));
    return s;
  }

  // The case's image embeddings into out_ (rows in prompt order): the device encoder's on the
  // golden pixel values (one call for all the case's images), or the golden ones (GetParam()).
  int64_t CaseEmbeddings(const Json& c, bool golden) {
    std::vector<std::string> names;
    for (const Json& n : c["images"]) names.push_back(n.get<std::string>());
    if (names.empty()) return 0;
    std::vector<float> rows;
    if (golden) {
      for (const std::string& n : names) {
        const std::vector<float> e = Flatten(cases_["images"][n]["vision"]["image_embeds"]);
        rows.insert(rows.end(), e.begin(), e.end());
      }
      EXPECT_EQ(cudaMemcpy(out_, rows.data(), sizeof(float) * rows.size(), cudaMemcpyHostToDevice),
                cudaSuccess);
    } else {
      rows = Encode(names);
    }
    return static_cast<int64_t>(rows.size()) / config_.vision->out_hidden_size;
  }

  // The case's positions (model/mrope_positions.h, as the engine computes them).
  model::MropePositions Positions(const Json& c) const {
    std::vector<model::MergedGrid> grids;
    const int64_t m = config_.vision->spatial_merge_size;
    for (const Json& n : c["images"]) {
      const VisionGrid g = GridOf(cases_["images"][n.get<std::string>()]["grid_thw"]);
      grids.push_back({g.h / m, g.w / m});
    }
    const std::vector<int32_t> prompt = testing::JsonInts(c["prompt_ids"]);
    auto p = model::ComputeMropePositions(prompt, config_.vision->image_token_id, grids);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *p : model::MropePositions();
  }

  // Prefills the first `count` prompt tokens from a reset slot, with the image inputs (3-D
  // positions and embedding overrides from out_'s `rows` rows) unless `text`; the logits of
  // token count - 1.
  std::vector<float> Prefill(const Json& c, const model::MropePositions& mrope, int64_t count,
                             int64_t rows, bool text = false) {
    const std::vector<int32_t> prompt = testing::JsonInts(c["prompt_ids"]);
    std::vector<int32_t> pos(3 * count), override_rows(count, -1);
    int32_t next = 0;
    for (int64_t i = 0; i < count; ++i) {
      pos[i] = static_cast<int32_t>(mrope.t[i]);
      pos[count + i] = static_cast<int32_t>(mrope.h[i]);
      pos[2 * count + i] = static_cast<int32_t>(mrope.w[i]);
      if (prompt[i] == config_.vision->image_token_id && rows > 0) override_rows[i] = next++;
    }
    PrefillInputs in;
    in.tokens = prompt.data();
    in.count = count;
    if (!text) {
      in.mrope_positions = pos.data();
      if (rows > 0) {
        in.embedding_rows = override_rows.data();
        in.embeddings = out_;
        in.embedding_count = rows;
      }
    }
    absl::Status s = model_->ResetSlot(0, stream_);
    EXPECT_TRUE(s.ok()) << s;
    s = model_->Prefill(in, Seq(), logits_, stream_);
    EXPECT_TRUE(s.ok()) << s;
    return Logits();
  }

  // One decode step of `token` at sequence index `position`, rotated at `rope_position`.
  std::vector<float> Decode(int32_t token, int32_t position, int32_t rope_position) {
    const int32_t host[4] = {token, position, rope_position, 0};
    EXPECT_EQ(cudaMemcpy(ints_ + kBlocksPerSeq, host, sizeof(host), cudaMemcpyHostToDevice),
              cudaSuccess);
    DecodeBatch b;
    b.batch = 1;
    b.tokens = ints_ + kBlocksPerSeq;
    b.positions = ints_ + kBlocksPerSeq + 1;
    b.rope_positions = ints_ + kBlocksPerSeq + 2;
    b.state_slots = ints_ + kBlocksPerSeq + 3;
    b.block_tables = ints_;
    b.max_blocks = kBlocksPerSeq;
    b.logits = logits_;
    const absl::Status s = model_->Decode(b, stream_);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    return Logits();
  }

  std::vector<float> Logits() {
    std::vector<float> out(vocab_);
    EXPECT_EQ(cudaMemcpy(out.data(), logits_, sizeof(float) * vocab_, cudaMemcpyDeviceToHost),
              cudaSuccess);
    return out;
  }

  // One comparison with the golden logits; its relative RMS goes to `rel`.
  void ExpectLogits(const std::string& what, const std::vector<float>& got,
                    const std::vector<float>& golden, double margin, std::vector<double>* rel) {
    const float abs = MaxAbsDiff(got, golden);
    const double r = RelRms(got, golden);
    EXPECT_LE(abs, kMaxAbs) << what;
    EXPECT_LE(r, kMaxRelRms) << what;
    if (margin > kClearMargin) {
      EXPECT_EQ(Argmax(got), Argmax(golden)) << what;
    }
    rel->push_back(r);
  }

  std::unique_ptr<CudaModel> model_;
  int64_t vocab_ = 0;
  void* state_ = nullptr;
  void* kv_ = nullptr;
  int32_t* ints_ = nullptr;  // the block table, then one decode batch's inputs
  float* logits_ = nullptr;
};

constexpr const char* kImageCases[] = {"image_noresize", "image_resize", "two_images"};

// Every stored prefill position (the image's first and last tokens, the GDN chunk boundaries,
// ...), each from a prefill of the prompt up to it.
TEST_P(CudaVisionModelTest, ImagePrefillMatchesTheGoldenLogits) {
  const bool golden = GetParam();
  std::vector<double> rel;
  for (const char* name : kImageCases) {
    const Json& c = Case(name);
    const model::MropePositions mrope = Positions(c);
    EXPECT_EQ(mrope.rope_delta, c["rope_delta"].get<int64_t>()) << name;
    EXPECT_EQ(mrope.t, c["mrope_position_ids"][0].get<std::vector<int64_t>>()) << name;
    EXPECT_EQ(mrope.h, c["mrope_position_ids"][1].get<std::vector<int64_t>>()) << name;
    EXPECT_EQ(mrope.w, c["mrope_position_ids"][2].get<std::vector<int64_t>>()) << name;
    const int64_t rows = CaseEmbeddings(c, golden);
    ASSERT_GT(rows, 0) << name;
    const Json& prefill = c["prefill"];
    float worst = 0;
    for (size_t k = 0; k < prefill["logits_positions"].size(); ++k) {
      const int64_t pos = prefill["logits_positions"][k].get<int64_t>();
      const std::vector<float> got = Prefill(c, mrope, pos + 1, rows);
      const std::vector<float> want = testing::JsonFloats(prefill["logits"][k]);
      worst = std::max(worst, MaxAbsDiff(got, want));
      ExpectLogits(absl::StrCat(name, " position ", pos), got, want,
                   prefill["top2_margin"][pos].get<double>(), &rel);
    }
    std::printf("[vision model %s, %s embeddings] prefill vs golden: max abs %.3g\n", name,
                golden ? "golden" : "device", worst);
  }
  std::printf("[vision model, %s embeddings] prefill median rel rms %.3g\n",
              golden ? "golden" : "device", Median(rel));
  EXPECT_LE(Median(rel), kMedianRelRms);
}

// Teacher-forced decode with the golden tokens (each rotated at index + rope_delta), then a
// free-running greedy continuation against the golden one.
TEST_P(CudaVisionModelTest, ImageDecodeAndGreedyMatchTheGolden) {
  const bool golden = GetParam();
  std::vector<double> rel;
  int agree = 0, total = 0;
  for (const char* name : kImageCases) {
    const Json& c = Case(name);
    const model::MropePositions mrope = Positions(c);
    const int64_t rows = CaseEmbeddings(c, golden);
    const int64_t L = static_cast<int64_t>(c["prompt_ids"].size());
    const std::vector<int32_t> generated = testing::JsonInts(c["greedy"]["generated_ids"]);
    const std::vector<double> margins =
        c["greedy"]["generated_top2_margin"].get<std::vector<double>>();
    const int64_t delta = mrope.rope_delta;
    Prefill(c, mrope, L, rows);
    for (size_t i = 0; i < generated.size(); ++i) {
      const int32_t pos = static_cast<int32_t>(L + i);
      EXPECT_EQ(pos + delta, c["greedy"]["decode_mrope_positions"][i].get<int64_t>());
      const std::vector<float> got = Decode(generated[i], pos, static_cast<int32_t>(pos + delta));
      const std::vector<float> want = testing::JsonFloats(c["greedy"]["decode_logits"][i]);
      // The margin that chose the next golden token (none stored after the last).
      const double margin = i + 1 < margins.size() ? margins[i + 1] : 0.0;
      ExpectLogits(absl::StrCat(name, " decode step ", i), got, want, margin, &rel);
    }
    // Greedy: the prefill's argmax, then each chosen token fed back.
    std::vector<float> logits = Prefill(c, mrope, L, rows);
    for (size_t i = 0; i < generated.size(); ++i) {
      ++total;
      const int32_t token = Argmax(logits);
      if (token != generated[i]) {
        std::printf("[vision model %s] greedy diverges at step %zu (golden margin %.3g)\n", name, i,
                    margins[i]);
        EXPECT_LT(margins[i], kGreedyMargin) << name << " step " << i;
        break;
      }
      ++agree;
      const int32_t pos = static_cast<int32_t>(L + i);
      logits = Decode(token, pos, static_cast<int32_t>(pos + delta));
    }
  }
  std::printf(
      "[vision model, %s embeddings] greedy agreement: %d of %d steps; decode median rel "
      "rms %.3g\n",
      golden ? "golden" : "device", agree, total, Median(rel));
  EXPECT_LE(Median(rel), kMedianRelRms);
}

INSTANTIATE_TEST_SUITE_P(Embeddings, CudaVisionModelTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "Golden" : "DeviceEncoder");
                         });

// text_only_len7: the text path as before, and 3-D positions that are equal on every axis give
// the very same logits (the mRoPE kernel then computes RoPE's angles).
TEST_F(CudaVisionModelTest, TextOnlyPromptIsUnchanged) {
  const Json& c = Case("text_only_len7");
  const model::MropePositions mrope = Positions(c);
  EXPECT_EQ(mrope.rope_delta, 0);
  const int64_t L = static_cast<int64_t>(c["prompt_ids"].size());
  const std::vector<float> text = Prefill(c, mrope, L, 0, /*text=*/true);
  const std::vector<float> three_d = Prefill(c, mrope, L, 0);
  EXPECT_EQ(MaxAbsDiff(text, three_d), 0.0f);
  std::vector<double> rel;
  ExpectLogits("text_only_len7 prefill", text, testing::JsonFloats(c["prefill"]["logits"].back()),
               c["prefill"]["top2_margin"].back().get<double>(), &rel);
  const std::vector<int32_t> generated = testing::JsonInts(c["greedy"]["generated_ids"]);
  for (size_t i = 0; i < generated.size(); ++i) {
    const int32_t pos = static_cast<int32_t>(L + i);
    ExpectLogits(absl::StrCat("text_only_len7 decode step ", i), Decode(generated[i], pos, pos),
                 testing::JsonFloats(c["greedy"]["decode_logits"][i]), 0.0, &rel);
  }
  std::printf("[vision model text_only_len7] median rel rms %.3g\n", Median(rel));
  EXPECT_LE(Median(rel), kMedianRelRms);
}

// The released encoder's sizes (workers/model/configs/qwen3_5_moe) with random weights: one
// 1024 x 1024 image (64 x 64 patches). Prints its time (the GPU kit's summary quotes the line);
// checks the output is finite.
TEST(CudaVisionFullSizeTest, EncodesA1024SquareImage) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  const std::string path =
      tandem::testing::SourcePath("/workers/model/configs/qwen3_5_moe/config.json");
  auto config = model::ParseModelConfigText(testing::ReadFileText(path), path);
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(config->vision.has_value());
  const VisionConfig& c = *config->vision;
  const int64_t O = c.out_hidden_size;
  // The generator --random_weights uses (model/random_checkpoint.h): its model.visual.* tensors
  // are made where they are read, here filled on the device.
  auto ck = model::RandomWeightsCheckpoint(testing::ReadFileText(path), 7, "random " + path);
  ASSERT_TRUE(ck.ok()) << ck.status();
  ASSERT_TRUE(HasVisionEncoder(**ck));
  auto e = CudaVisionEncoder::Load(**ck, c);
  ASSERT_TRUE(e.ok()) << e.status();
  CudaVisionEncoder& encoder = **e;
  const VisionGrid grid{1, 64, 64};
  ASSERT_TRUE(encoder.Reserve(grid.patches()).ok());
  std::vector<float> pixels(static_cast<size_t>(grid.patches() * c.patch_dim()));
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& x : pixels) x = u(rng);
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreate(&stream));
  float* out = nullptr;
  const int64_t rows = encoder.OutputRows({grid});
  CUDA_OK(cudaMalloc(&out, sizeof(float) * rows * O));
  ASSERT_TRUE(encoder.Encode(pixels, {grid}, out, stream).ok());  // warm-up
  constexpr int kRuns = 3;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kRuns; ++i) ASSERT_TRUE(encoder.Encode(pixels, {grid}, out, stream).ok());
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
      kRuns;
  std::vector<float> host(static_cast<size_t>(rows * O));
  CUDA_OK(cudaMemcpy(host.data(), out, sizeof(float) * host.size(), cudaMemcpyDeviceToHost));
  double sumsq = 0;
  for (float x : host) {
    ASSERT_TRUE(std::isfinite(x));
    sumsq += static_cast<double>(x) * x;
  }
  std::printf(
      "vision encoder full size: 1024x1024 image, %lld patches, %lld blocks, %.1f ms per image "
      "(host pixel conversion and upload included), %.2f GB weights, %.2f GB scratch, output rms "
      "%.3g\n",
      static_cast<long long>(grid.patches()), static_cast<long long>(c.depth), ms,
      encoder.weight_bytes() / 1e9, CudaVisionEncoder::ScratchBytes(c, grid.patches()) / 1e9,
      std::sqrt(sumsq / static_cast<double>(host.size())));
  RecordProperty("vision_encoder_1024_ms", absl::StrCat(ms));
  EXPECT_GT(sumsq, 0.0);
  cudaFree(out);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace tandem::workers::cuda
