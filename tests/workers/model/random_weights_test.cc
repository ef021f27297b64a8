// Random weights (workers/model/random_weights.h, random_checkpoint.h) and the released configs
// (workers/model/configs/): the configs parse with the engines' parsers and give the published
// parameter counts; the generator is a pure function of (seed, tensor name, index); a checkpoint
// written with seed S gives exactly the logits of the in-memory random model with seed S; and
// random router weights route about uniformly.

#include "workers/model/random_weights.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/golden_files.h"
#include "tests/support/random_models.h"
#include "tests/support/temp_path.h"
#include "tests/support/test_paths.h"
#include "workers/cpu/cpu_kernels.h"
#include "workers/cpu/cpu_model.h"
#include "workers/model/nemotron_h_config.h"
#include "workers/model/qwen35_moe_config.h"
#include "workers/model/random_checkpoint.h"
#include "workers/model/safetensors.h"

namespace tandem::workers::cpu {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

const std::string kQwenConfig =
    tandem::testing::SourcePath("/workers/model/configs/qwen3_5_moe/config.json");
const std::string kNemotronConfig =
    tandem::testing::SourcePath("/workers/model/configs/nemotron_h/config.json");
const std::string kQwenPreprocessor =
    tandem::testing::SourcePath("/workers/model/configs/qwen3_5_moe/preprocessor_config.json");
const std::string kGoldenVl = tandem::testing::SourcePath("/tests/golden/qwen3_5_moe_vl");
const std::string kQwen3Tokenizer =
    tandem::testing::SourcePath("/tests/tokenizer/qwen3/tokenizer.json");

// Parameters of a model: all of them (the text model's), and those one token uses (each MoE
// layer's routed experts count k/E; the input embedding is a lookup, counted apart); Qwen's vision
// tower (model.visual.*) apart.
struct Counts {
  int64_t total = 0;
  int64_t routed = 0;
  int64_t embedding = 0;
  int64_t vision = 0;
  double active_without_embedding(double k_over_e) const {
    return static_cast<double>(total - embedding) - static_cast<double>(routed) * (1 - k_over_e);
  }
};

Counts Count(const std::vector<model::RandomTensorSpec>& specs) {
  Counts c;
  for (const model::RandomTensorSpec& s : specs) {
    if (s.name.starts_with("model.visual.")) {
      c.vision += s.elements();
      continue;
    }
    c.total += s.elements();
    // Routed experts: Qwen's fused mlp.experts.*, Nemotron's mixer.experts.N.* (not the
    // shared_experts).
    if (s.name.find(".experts.") != std::string::npos) c.routed += s.elements();
    if (s.name.find("embed") != std::string::npos) c.embedding += s.elements();
  }
  return c;
}

TEST(ReleasedConfigsTest, QwenParsesWithTheReleasedDimensions) {
  const Json config = testing::ReadJsonFile(kQwenConfig);
  ASSERT_TRUE(config.is_object()) << kQwenConfig;
  auto c = model::qwen35::ParseConfig(config);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->vocab_size, 248320);
  EXPECT_EQ(c->hidden_size, 2048);
  EXPECT_EQ(c->num_layers, 40);
  EXPECT_EQ(std::count(c->full_attention.begin(), c->full_attention.end(), true), 10);
  EXPECT_TRUE(c->full_attention[3] && c->full_attention[39] && !c->full_attention[0]);
  EXPECT_EQ(c->num_heads, 16);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_EQ(c->head_dim, 256);
  EXPECT_EQ(c->rotary_dim, 64);
  EXPECT_EQ(c->rope_theta, 1e7f);
  EXPECT_EQ(c->linear_key_heads, 16);
  EXPECT_EQ(c->linear_value_heads, 32);
  EXPECT_EQ(c->conv_dim(), 8192);
  EXPECT_EQ(c->num_experts, 256);
  EXPECT_EQ(c->experts_per_token, 8);
  EXPECT_EQ(c->moe_intermediate, 512);
  EXPECT_EQ(c->shared_intermediate, 512);
  EXPECT_EQ(c->max_positions, 262144);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->eos_token_ids, std::vector<int32_t>{248044});
  // The vision tower and the ids that place images (configs/README.md says where from).
  auto v = model::qwen35::ParseVisionConfig(config, *c);
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_TRUE(v->has_value());
  EXPECT_EQ((*v)->depth, 27);
  EXPECT_EQ((*v)->hidden_size, 1152);
  EXPECT_EQ((*v)->intermediate_size, 4304);
  EXPECT_EQ((*v)->num_heads, 16);
  EXPECT_EQ((*v)->head_dim(), 72);
  EXPECT_EQ((*v)->patch_size, 16);
  EXPECT_EQ((*v)->temporal_patch_size, 2);
  EXPECT_EQ((*v)->spatial_merge_size, 2);
  EXPECT_EQ((*v)->out_hidden_size, 2048);
  EXPECT_EQ((*v)->num_position_embeddings, 2304);
  EXPECT_EQ((*v)->position_side(), 48);
  EXPECT_TRUE((*v)->tanh_gelu);
  EXPECT_EQ((*v)->vision_start_token_id, 248053);
  EXPECT_EQ((*v)->vision_end_token_id, 248054);
  EXPECT_EQ((*v)->image_token_id, 248056);
  // Its image processor: the released settings, with the vision config's sizes.
  const Json pre = testing::ReadJsonFile(kQwenPreprocessor);
  ASSERT_TRUE(pre.is_object()) << kQwenPreprocessor;
  EXPECT_EQ(pre["size"]["shortest_edge"], 65536);
  EXPECT_EQ(pre["size"]["longest_edge"], 16777216);
  EXPECT_EQ(pre["patch_size"], (*v)->patch_size);
  EXPECT_EQ(pre["temporal_patch_size"], (*v)->temporal_patch_size);
  EXPECT_EQ(pre["merge_size"], (*v)->spatial_merge_size);
  EXPECT_EQ(pre["image_mean"], Json({0.5, 0.5, 0.5}));
  EXPECT_EQ(pre["image_std"], Json({0.5, 0.5, 0.5}));
}

TEST(ReleasedConfigsTest, NemotronParsesWithTheReleasedDimensions) {
  const Json config = testing::ReadJsonFile(kNemotronConfig);
  ASSERT_TRUE(config.is_object()) << kNemotronConfig;
  auto c = model::nemotron_h::ParseConfig(config, kNemotronConfig);
  ASSERT_TRUE(c.ok()) << c.status();
  using model::nemotron_h::LayerKind;
  EXPECT_EQ(c->vocab, 131072);
  EXPECT_EQ(c->hidden, 2688);
  ASSERT_EQ(c->kinds.size(), 52u);
  EXPECT_EQ(c->Count(LayerKind::kMamba), 23);
  EXPECT_EQ(c->Count(LayerKind::kMoe), 23);
  EXPECT_EQ(c->Count(LayerKind::kAttention), 6);
  for (int i : {5, 12, 19, 26, 33, 42}) EXPECT_EQ(c->kinds[i], LayerKind::kAttention) << i;
  EXPECT_EQ(c->heads, 32);
  EXPECT_EQ(c->kv_heads, 2);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->d_inner(), 4096);
  EXPECT_EQ(c->conv_dim(), 6144);
  EXPECT_EQ(c->in_proj_rows(), 10304);
  EXPECT_EQ(c->experts, 128);
  EXPECT_EQ(c->top_k, 6);
  EXPECT_EQ(c->moe_inter, 1856);
  EXPECT_EQ(c->shared_inter, 3712);
  EXPECT_EQ(c->routed_scale, 2.5f);
  EXPECT_EQ(c->eps, 1e-5f);
  EXPECT_EQ(c->eos, std::vector<int32_t>{2});
}

// docs/models.md §3: Qwen3.5 text model without MTP 34.66B (69.3 GB BF16), ~2.95B active
// per token plus the embedding lookup; Nemotron 31,577,940,288 (63.16 GB), 3.23B active without
// the input embedding and 3.58B with it. Computed here from every tensor the engines read.
TEST(ReleasedConfigsTest, ParameterCountsMatchTheModelSpec) {
  auto qwen = model::RandomTensorSpecs(testing::ReadJsonFile(kQwenConfig), 1);
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  const Counts q = Count(*qwen);
  std::printf(
      "qwen3_5_moe: %lld parameters (%.2f GB BF16), %.3fB active per token without the "
      "embedding\n",
      static_cast<long long>(q.total), 2e-9 * static_cast<double>(q.total),
      1e-9 * q.active_without_embedding(8.0 / 256));
  EXPECT_NEAR(static_cast<double>(q.total), 34.66e9, 0.01 * 34.66e9);
  EXPECT_NEAR(2.0 * static_cast<double>(q.total), 69.3e9, 0.01 * 69.3e9);
  EXPECT_NEAR(q.active_without_embedding(8.0 / 256), 2.95e9, 0.02 * 2.95e9);
  EXPECT_EQ(q.embedding, int64_t{248320} * 2048);
  // The vision tower: 27 blocks of 15,239,504, the patch embedding (1,770,624), the 48 x 48
  // position table (2,654,208) and the merger (30,679,808). With the MTP head the engines do
  // not read (844,640,768: fc 2048 x 4096, one attention layer, 256 experts of 512, norms), the
  // released checkpoint's total is 35,951,822,704 (configs/README.md): exactly.
  std::printf("qwen3_5_moe vision tower: %lld parameters (%.2f GB BF16)\n",
              static_cast<long long>(q.vision), 2e-9 * static_cast<double>(q.vision));
  EXPECT_EQ(q.vision, 446571248);
  EXPECT_EQ(q.total + q.vision + 844640768, 35951822704);

  auto nemotron = model::RandomTensorSpecs(testing::ReadJsonFile(kNemotronConfig), 1);
  ASSERT_TRUE(nemotron.ok()) << nemotron.status();
  const Counts n = Count(*nemotron);
  const double n_active = n.active_without_embedding(6.0 / 128);
  std::printf(
      "nemotron_h: %lld parameters (%.2f GB BF16), %.3fB active per token without the "
      "input embedding, %.3fB with it\n",
      static_cast<long long>(n.total), 2e-9 * static_cast<double>(n.total), 1e-9 * n_active,
      1e-9 * (n_active + static_cast<double>(n.embedding)));
  EXPECT_NEAR(static_cast<double>(n.total), 31.58e9, 0.01 * 31.58e9);
  EXPECT_NEAR(2.0 * static_cast<double>(n.total), 63.16e9, 0.01 * 63.16e9);
  EXPECT_NEAR(n_active, 3.23e9, 0.02 * 3.23e9);
  EXPECT_NEAR(n_active + static_cast<double>(n.embedding), 3.58e9, 0.02 * 3.58e9);
}

// The full-size random models are descriptions until an engine reads them: building one holds
// no weights in host memory (the CUDA upload fills device memory from the descriptions).
TEST(ReleasedConfigsTest, FullSizeRandomCheckpointsAreGeneratedNotStored) {
  for (const std::string& path : {kQwenConfig, kNemotronConfig}) {
    const Json config = testing::ReadJsonFile(path);
    auto ck = model::RandomWeightsCheckpoint(config.dump(), 3, "random");
    ASSERT_TRUE(ck.ok()) << ck.status();
    EXPECT_THAT((*ck)->config_json(), HasSubstr("\"tandem_random_weights\": true"));
    EXPECT_GT((*ck)->stored_bytes(), uint64_t{60000000000}) << path;  // 69.3 GB, 63.2 GB
    int64_t checked = 0;
    for (const auto& [name, t] : (*ck)->tensors()) {
      ASSERT_TRUE(t->random.has_value()) << name;
      EXPECT_EQ(t->data, nullptr) << name;
      // A few elements anywhere in the tensor, without materialising it.
      // In range, up to the BF16 rounding (half an ulp: 2^-9 relative).
      const float bound =
          t->random->half_width + (std::abs(t->random->center) + t->random->half_width) / 512;
      for (int64_t i : {int64_t{0}, t->elements() / 2, t->elements() - 1}) {
        const float v = t->Element(i);
        EXPECT_TRUE(std::isfinite(v)) << name;
        EXPECT_LE(std::abs(v - t->random->center), bound) << name;
      }
      ++checked;
    }
    EXPECT_GT(checked, 400) << path;
  }
}

TEST(RandomWeightTest, IsAPureFunctionOfSeedNameAndIndex) {
  const model::RandomFill a{model::RandomTensorKey(7, "lm_head.weight"), 0.0f, 0.5f};
  const model::RandomFill same{model::RandomTensorKey(7, "lm_head.weight"), 0.0f, 0.5f};
  const model::RandomFill other_seed{model::RandomTensorKey(8, "lm_head.weight"), 0.0f, 0.5f};
  const model::RandomFill other_name{model::RandomTensorKey(7, "lm_head.bias"), 0.0f, 0.5f};
  int other_seed_equal = 0, name_equal = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(model::RandomWeight(a, i), model::RandomWeight(same, i));
    other_seed_equal += model::RandomWeight(a, i) == model::RandomWeight(other_seed, i);
    name_equal += model::RandomWeight(a, i) == model::RandomWeight(other_name, i);
  }
  // BF16 has 2^8 values per binade, so a few coincide by chance.
  EXPECT_LT(other_seed_equal, 50);
  EXPECT_LT(name_equal, 50);
  // Pinned values: a checkpoint written by an earlier build must keep matching --random_weights.
  // (Recomputed independently from the definition in random_weights.h, in Python.)
  EXPECT_EQ(model::RandomTensorKey(1, "lm_head.weight"), 0x073D2AC29A6AE73Cull);
  const model::RandomFill pinned{model::RandomTensorKey(1, "lm_head.weight"), 0.0f, 1.0f};
  EXPECT_EQ(model::RandomWeightBf16(pinned, 0), 0xBE91);
  EXPECT_EQ(model::RandomWeightBf16(pinned, 123456789), 0x3ED2);
}

TEST(RandomWeightTest, IsUniformInItsRangeAndExactlyABf16) {
  const model::RandomFill f{model::RandomTensorKey(1, "w"), 1.0f, 0.25f};
  constexpr int64_t kN = 200000;
  double sum = 0, sum2 = 0;
  float lo = 10, hi = -10;
  for (int64_t i = 0; i < kN; ++i) {
    const float v = model::RandomWeight(f, i);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    ASSERT_EQ(bits & 0xFFFFu, 0u) << "not a BF16 at " << i;
    ASSERT_EQ(model::RandomWeightBf16(f, i), bits >> 16);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
    sum2 += (v - 1.0) * (v - 1.0);
  }
  EXPECT_GE(lo, 0.75f);
  EXPECT_LE(hi, 1.25f);
  EXPECT_LT(lo, 0.76f);
  EXPECT_GT(hi, 1.24f);
  EXPECT_NEAR(sum / kN, 1.0, 1e-3);
  // Uniform: variance half_width^2 / 3.
  EXPECT_NEAR(sum2 / kN, 0.25 * 0.25 / 3, 0.02 * 0.25 * 0.25 / 3);
}

// Prefill of a prompt (every position's logits), then three decode steps.
std::vector<float> RunLogits(const model::Checkpoint& ck) {
  auto model = LoadCpuModel(ck);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return {};
  auto state = (*model)->NewState();
  std::vector<float> all, logits;
  const std::vector<int32_t> prompt = {1, 17, 299, 42, 42, 7, 250, 3};
  EXPECT_TRUE((*model)->Forward(state.get(), prompt, /*all_logits=*/true, &logits).ok());
  all = logits;
  for (int32_t t : {5, 123, 64}) {
    EXPECT_TRUE((*model)->Forward(state.get(), {&t, 1}, false, &logits).ok());
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The done-when of --random_weights on the CPU: written with seed S, loaded by the native
// engine, the logits are those of the in-memory random model with seed S, bit for bit; as BF16
// or F32, in one file or in shards.
TEST(RandomWeightsTest, WrittenCheckpointGivesTheLogitsOfTheInMemoryModel) {
  for (const char* arch : {"qwen3_5_moe", "nemotron_h"}) {
    for (const model::DType dtype : {model::DType::kBF16, model::DType::kF32}) {
      SCOPED_TRACE(::testing::Message() << arch << " " << model::DTypeName(dtype));
      model::RandomModelOptions o = testing::SmallRandomModel(arch);
      o.seed = 11;
      o.dtype = dtype;
      o.shard_bytes = dtype == model::DType::kF32 ? 64 << 10 : 0;
      const std::string dir =
          tandem::testing::TempPath(std::string("random-") + arch + model::DTypeName(dtype));
      ASSERT_TRUE(model::WriteRandomCheckpoint(o, dir).ok());
      auto written = model::Checkpoint::Open(dir);
      ASSERT_TRUE(written.ok()) << written.status();
      auto config = model::RandomModelConfig(o);
      ASSERT_TRUE(config.ok());
      auto generated = model::RandomWeightsCheckpoint(config->dump(), 11, "in memory");
      ASSERT_TRUE(generated.ok()) << generated.status();

      // The same tensors, element for element.
      ASSERT_EQ((*written)->tensor_count(), (*generated)->tensor_count());
      for (const auto& [name, t] : (*generated)->tensors()) {
        auto w = (*written)->Get(name, t->shape);
        ASSERT_TRUE(w.ok()) << w.status();
        ASSERT_TRUE(BitwiseEqual((*w)->ToFloat(), t->ToFloat())) << name;
      }
      const std::vector<float> from_disk = RunLogits(**written);
      const std::vector<float> in_memory = RunLogits(**generated);
      ASSERT_FALSE(in_memory.empty());
      EXPECT_TRUE(BitwiseEqual(from_disk, in_memory));
      for (float v : in_memory) ASSERT_TRUE(std::isfinite(v));

      // Another seed is another model.
      auto reseeded = model::RandomWeightsCheckpoint(config->dump(), 12, "in memory");
      ASSERT_TRUE(reseeded.ok());
      EXPECT_FALSE(BitwiseEqual(RunLogits(**reseeded), in_memory));
    }
  }
}

// The worker reads the written checkpoint's marks to say its weights are random.
TEST(RandomWeightsTest, ConfigsCarryTheRandomWeightsMarks) {
  const std::string dir = tandem::testing::TempPath("marks");
  model::RandomModelOptions o = testing::SmallRandomModel("nemotron_h");
  o.seed = 5;
  ASSERT_TRUE(model::WriteRandomCheckpoint(o, dir).ok());
  auto written = model::Checkpoint::Open(dir);
  ASSERT_TRUE(written.ok());
  const Json marks = Json::parse((*written)->config_json());
  EXPECT_EQ(marks["tandem_random_weights"], true);
  EXPECT_EQ(marks["tandem_random_seed"], 5);
  auto generated = model::RandomWeightsCheckpoint(marks.dump(), 6, "in memory");
  ASSERT_TRUE(generated.ok());
  EXPECT_EQ(Json::parse((*generated)->config_json())["tandem_random_seed"], 6);
}

TEST(RandomWeightsTest, BadConfigsAreRefusedNamingTheProblem) {
  EXPECT_THAT(std::string(model::RandomWeightsCheckpoint("not json", 1, "cfg").status().message()),
              HasSubstr("cfg: config.json is not a JSON object"));
  EXPECT_EQ(model::RandomWeightsCheckpoint(R"({"model_type": "llama"})", 1, "cfg").status().code(),
            absl::StatusCode::kUnimplemented);
  Json qwen = testing::ReadJsonFile(kQwenConfig);
  qwen["text_config"].erase("hidden_size");
  EXPECT_THAT(std::string(model::RandomWeightsCheckpoint(qwen.dump(), 1, "cfg").status().message()),
              HasSubstr("hidden_size"));
  std::vector<model::TensorView> twice(2);
  twice[0].name = twice[1].name = "w";
  twice[0].shape = twice[1].shape = {1};
  twice[0].random = twice[1].random = model::RandomFill{};
  EXPECT_THAT(std::string(model::Checkpoint::FromTensors("x", "{}", twice).status().message()),
              HasSubstr("tensor w twice"));
}

// The golden multimodal checkpoint's tensor list (tests/golden/qwen3_5_moe_vl/tensors.txt: the
// released names, written by an independent generator): every tensor, text and vision, by name
// and shape, from its config.json alone.
TEST(RandomVisionTest, SpecsAreTheGoldenCheckpointsTensors) {
  const Json config = testing::ReadJsonFile(std::string(kGoldenVl) + "/config.json");
  auto specs = model::RandomTensorSpecs(config, 1);
  ASSERT_TRUE(specs.ok()) << specs.status();
  std::map<std::string, std::string> got, want;
  for (const model::RandomTensorSpec& s : *specs) {
    std::string shape;
    for (int64_t d : s.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    got[s.name] = "[" + shape + "]";
  }
  std::istringstream lines(testing::ReadFileText(std::string(kGoldenVl) + "/tensors.txt"));
  std::string line;
  int visual = 0;
  while (std::getline(lines, line)) {
    const size_t tab1 = line.find('\t'), tab2 = line.rfind('\t');
    ASSERT_NE(tab1, std::string::npos) << line;
    const std::string name = line.substr(0, tab1);
    want[name] = line.substr(tab2 + 1);
    visual += name.starts_with("model.visual.");
  }
  EXPECT_EQ(visual, 33);
  EXPECT_EQ(got, want);
}

// A small multimodal model: vision_config as the engines parse it (ParseVisionConfig), the ids at
// the top of the vocabulary, and the tower's tensors at the options' sizes.
TEST(RandomVisionTest, SmallQwenModelsHaveAVisionTowerByDefault) {
  model::RandomModelOptions o = testing::SmallRandomModel("qwen3_5_moe");
  auto config = model::RandomModelConfig(o);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ((*config)["vision_config"]["model_type"], "qwen3_5_moe_vision");
  EXPECT_EQ((*config)["vision_config"]["hidden_act"], "gelu_pytorch_tanh");
  EXPECT_EQ((*config)["vision_config"]["deepstack_visual_indexes"], Json::array());
  auto text = model::qwen35::ParseConfig(*config);
  ASSERT_TRUE(text.ok()) << text.status();
  auto v = model::qwen35::ParseVisionConfig(*config, *text);
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_TRUE(v->has_value());
  EXPECT_EQ((*v)->depth, o.vision_depth);
  EXPECT_EQ((*v)->hidden_size, 64);
  EXPECT_EQ((*v)->head_dim(), 32);
  EXPECT_EQ((*v)->out_hidden_size, o.hidden_size);
  EXPECT_EQ((*v)->position_side(), 8);
  EXPECT_EQ((*v)->vision_start_token_id, 297);  // vocab 300
  EXPECT_EQ((*v)->vision_end_token_id, 298);
  EXPECT_EQ((*v)->image_token_id, 299);

  auto specs = model::RandomTensorSpecs(*config, 1);
  ASSERT_TRUE(specs.ok()) << specs.status();
  std::map<std::string, std::vector<int64_t>> shape;
  std::map<std::string, model::RandomFill> fill;
  for (const model::RandomTensorSpec& s : *specs) {
    shape[s.name] = s.shape;
    fill[s.name] = s.fill;
  }
  using Shape = std::vector<int64_t>;
  const std::string p = "model.visual.";
  EXPECT_EQ(shape[p + "patch_embed.proj.weight"], (Shape{64, 3, 2, 16, 16}));
  EXPECT_EQ(shape[p + "patch_embed.proj.bias"], Shape{64});
  EXPECT_EQ(shape[p + "pos_embed.weight"], (Shape{64, 64}));
  EXPECT_EQ(shape[p + "blocks.1.attn.qkv.weight"], (Shape{192, 64}));
  EXPECT_EQ(shape[p + "blocks.1.attn.qkv.bias"], Shape{192});
  EXPECT_EQ(shape[p + "blocks.1.attn.proj.weight"], (Shape{64, 64}));
  EXPECT_EQ(shape[p + "blocks.1.mlp.linear_fc1.weight"], (Shape{128, 64}));
  EXPECT_EQ(shape[p + "blocks.1.mlp.linear_fc2.weight"], (Shape{64, 128}));
  EXPECT_EQ(shape[p + "blocks.0.norm2.bias"], Shape{64});
  EXPECT_EQ(shape[p + "merger.norm.weight"], Shape{64});
  EXPECT_EQ(shape[p + "merger.linear_fc1.weight"], (Shape{256, 256}));
  EXPECT_EQ(shape[p + "merger.linear_fc2.weight"], (Shape{64, 256}));
  EXPECT_EQ(shape[p + "merger.linear_fc2.bias"], Shape{64});
  EXPECT_FALSE(shape.contains(p + "blocks.2.norm1.weight"));
  // Scales: projections 1/sqrt(fan_in) (a patch is 3 * 2 * 16 * 16 values), plain LayerNorms at
  // 1, biases small.
  EXPECT_FLOAT_EQ(fill[p + "patch_embed.proj.weight"].half_width, 1 / std::sqrt(1536.0f));
  EXPECT_FLOAT_EQ(fill[p + "merger.linear_fc2.weight"].half_width, 1 / 16.0f);
  EXPECT_EQ(fill[p + "blocks.0.norm1.weight"].center, 1.0f);
  EXPECT_EQ(fill[p + "merger.norm.weight"].center, 1.0f);
  EXPECT_EQ(fill[p + "blocks.0.attn.qkv.bias"].center, 0.0f);
  EXPECT_LE(fill[p + "blocks.0.attn.qkv.bias"].half_width, 0.05f);
  // 12 tensors a block, 9 others.
  int visual = 0;
  for (const auto& [name, s] : shape) visual += name.starts_with(p);
  EXPECT_EQ(visual, 12 * o.vision_depth + 9);
}

// The written checkpoint carries the vision config and the image processor's settings for it;
// a text-only one (vision off) and Nemotron carry neither.
TEST(RandomVisionTest, WrittenCheckpointsHaveAPreprocessorConfigExactlyWhenMultimodal) {
  model::RandomModelOptions o = testing::SmallRandomModel("qwen3_5_moe");
  o.num_layers = 1;
  o.vision_patch_size = 8;
  o.vision_merge_size = 4;
  const std::string dir = tandem::testing::TempPath("vision-ckpt");
  ASSERT_TRUE(model::WriteRandomCheckpoint(o, dir).ok());
  auto written = model::Checkpoint::Open(dir);
  ASSERT_TRUE(written.ok()) << written.status();
  const Json config = Json::parse((*written)->config_json());
  auto text = model::qwen35::ParseConfig(config);
  ASSERT_TRUE(text.ok()) << text.status();
  auto v = model::qwen35::ParseVisionConfig(config, *text);
  ASSERT_TRUE(v.ok() && v->has_value()) << v.status();
  EXPECT_EQ((*v)->patch_size, 8);
  EXPECT_EQ((*v)->spatial_merge_size, 4);
  EXPECT_TRUE((*written)->tensors().contains("model.visual.merger.linear_fc1.weight"));
  const Json pre = testing::ReadJsonFile(dir + "/preprocessor_config.json");
  ASSERT_TRUE(pre.is_object());
  EXPECT_EQ(pre["patch_size"], 8);
  EXPECT_EQ(pre["merge_size"], 4);
  EXPECT_EQ(pre["temporal_patch_size"], 2);
  // The rest as tests/golden/qwen3_5_moe_vl/preprocessor_config.json (the released values).
  Json golden = testing::ReadJsonFile(std::string(kGoldenVl) + "/preprocessor_config.json");
  golden["patch_size"] = 8;
  golden["merge_size"] = 4;
  EXPECT_EQ(pre, golden);

  o.vision = false;
  const std::string text_dir = tandem::testing::TempPath("text-ckpt");
  ASSERT_TRUE(model::WriteRandomCheckpoint(o, text_dir).ok());
  auto text_only = model::Checkpoint::Open(text_dir);
  ASSERT_TRUE(text_only.ok()) << text_only.status();
  const Json text_config = Json::parse((*text_only)->config_json());
  EXPECT_FALSE(text_config.contains("vision_config"));
  EXPECT_FALSE(text_config.contains("image_token_id"));
  for (const auto& [name, t] : (*text_only)->tensors()) {
    EXPECT_FALSE(name.starts_with("model.visual.")) << name;
  }
  EXPECT_FALSE(std::ifstream(text_dir + "/preprocessor_config.json").good());

  const std::string nemotron_dir = tandem::testing::TempPath("nemotron-ckpt");
  ASSERT_TRUE(
      model::WriteRandomCheckpoint(testing::SmallRandomModel("nemotron_h"), nemotron_dir).ok());
  EXPECT_FALSE(std::ifstream(nemotron_dir + "/preprocessor_config.json").good());
}

TEST(RandomVisionTest, BadVisionSizesAndIdsAreRefusedNamingTheProblem) {
  const auto error = [](const model::RandomModelOptions& o) {
    auto c = model::RandomModelConfig(o);
    return c.ok() ? std::string("ok") : std::string(c.status().message());
  };
  model::RandomModelOptions o = testing::SmallRandomModel("qwen3_5_moe");
  o.vision_heads = 3;  // 64 / 3
  EXPECT_THAT(error(o), HasSubstr("head dim"));
  o = testing::SmallRandomModel("qwen3_5_moe");
  o.vision_position_embeddings = 60;
  EXPECT_THAT(error(o), HasSubstr("square"));
  o = testing::SmallRandomModel("qwen3_5_moe");
  o.image_token_id = 300;  // vocab 300
  EXPECT_THAT(error(o), HasSubstr("image_token_id"));
  o = testing::SmallRandomModel("qwen3_5_moe");
  o.vision_end_token_id = 297;  // the start's
  EXPECT_THAT(error(o), HasSubstr("three different ids"));
  o = testing::SmallRandomModel("qwen3_5_moe");
  o.eos_token_id = 299;  // the image's
  EXPECT_THAT(error(o), HasSubstr("eos_token_id"));
  o.vision = false;  // no vision ids then
  EXPECT_EQ(error(o), "ok");
}

// tandem-make-checkpoint --tokenizer: the ids are the tokenizer's, so the worker's tokenizer and
// the config agree on where images go.
TEST(RandomVisionTest, TokenIdsComeFromTheTokenizer) {
  const Json tokenizer = testing::ReadJsonFile(kQwen3Tokenizer);
  ASSERT_TRUE(tokenizer.is_object()) << kQwen3Tokenizer;
  model::RandomModelOptions o = testing::SmallRandomModel("qwen3_5_moe");
  ASSERT_TRUE(model::VisionTokenIdsFromTokenizer(tokenizer, &o).ok());
  // Qwen3's added tokens (Qwen3.5's vocabulary has them at 248053, 248054 and 248056).
  EXPECT_EQ(o.vision_start_token_id, 151652);
  EXPECT_EQ(o.vision_end_token_id, 151653);
  EXPECT_EQ(o.image_token_id, 151655);
  o.vocab_size = 151669;
  auto config = model::RandomModelConfig(o);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ((*config)["image_token_id"], 151655);

  // A token in the vocabulary rather than the added tokens counts too.
  const Json plain = {{"model", {{"vocab", {{"<|vision_start|>", 5}, {"<|image_pad|>", 7}}}}},
                      {"added_tokens", {{{"id", 6}, {"content", "<|vision_end|>"}}}}};
  ASSERT_TRUE(model::VisionTokenIdsFromTokenizer(plain, &o).ok());
  EXPECT_EQ(o.vision_start_token_id, 5);
  EXPECT_EQ(o.vision_end_token_id, 6);
  EXPECT_EQ(o.image_token_id, 7);

  const Json lacking = {{"model", {{"vocab", {{"<|vision_start|>", 5}}}}}};
  const absl::Status s = model::VisionTokenIdsFromTokenizer(lacking, &o);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("<|vision_end|>, <|image_pad|>"));
  EXPECT_EQ(o.vision_start_token_id, 5);  // unchanged on failure
  EXPECT_EQ(model::VisionTokenIdsFromTokenizer(Json::array(), &o).code(),
            absl::StatusCode::kInvalidArgument);
}

// "router weights random: expert load is about uniform": the routers of the full-size random
// models, on random unit-RMS hidden states, spread the k choices of 4096 tokens evenly.
void ExpectUniformLoad(const Json& config, const std::string& router, const std::string& bias,
                       int64_t experts, int64_t k, int64_t hidden, bool sigmoid) {
  auto specs = model::RandomTensorSpecs(config, 1);
  ASSERT_TRUE(specs.ok()) << specs.status();
  std::map<std::string, const model::RandomTensorSpec*> by_name;
  for (const model::RandomTensorSpec& s : *specs) by_name[s.name] = &s;
  ASSERT_TRUE(by_name.contains(router)) << router;
  std::vector<float> w(static_cast<size_t>(experts * hidden)), b(static_cast<size_t>(experts));
  for (int64_t i = 0; i < experts * hidden; ++i)
    w[i] = model::RandomWeight(by_name[router]->fill, i);
  if (!bias.empty()) {
    ASSERT_TRUE(by_name.contains(bias)) << bias;
    for (int64_t i = 0; i < experts; ++i) b[i] = model::RandomWeight(by_name[bias]->fill, i);
  }
  constexpr int64_t kTokens = 4096;
  const model::RandomFill xs{model::RandomTensorKey(99, "hidden states"), 0.0f, std::sqrt(3.0f)};
  std::vector<float> x(static_cast<size_t>(kTokens * hidden));
  for (int64_t i = 0; i < kTokens * hidden; ++i) x[i] = model::RandomWeight(xs, i);
  std::vector<float> logits(static_cast<size_t>(kTokens * experts));
  Linear(x.data(), kTokens, hidden, w.data(), experts, logits.data());
  std::vector<int64_t> load(static_cast<size_t>(experts), 0), order(static_cast<size_t>(experts));
  for (int64_t t = 0; t < kTokens; ++t) {
    std::vector<float> score(logits.begin() + t * experts, logits.begin() + (t + 1) * experts);
    // Softmax is monotonic: top-k of the logits. Sigmoid + bias: of the biased scores.
    if (sigmoid) {
      for (int64_t e = 0; e < experts; ++e) score[e] = 1 / (1 + std::exp(-score[e])) + b[e];
    }
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int64_t a, int64_t c) { return score[a] > score[c]; });
    for (int64_t j = 0; j < k; ++j) ++load[order[j]];
  }
  const double mean = static_cast<double>(kTokens * k) / static_cast<double>(experts);
  double var = 0;
  for (int64_t l : load) var += (l - mean) * (l - mean);
  const double cv = std::sqrt(var / static_cast<double>(experts)) / mean;
  const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
  std::printf("%s: expert load %lld..%lld per %.0f mean, coefficient of variation %.3f\n",
              router.c_str(), static_cast<long long>(*lo), static_cast<long long>(*hi), mean, cv);
  // Multinomial noise alone gives a coefficient of variation of ~sqrt(1/mean): 0.09 for Qwen,
  // 0.07 for Nemotron.
  EXPECT_LT(cv, 0.2);
  EXPECT_GT(static_cast<double>(*lo), 0.5 * mean);
  EXPECT_LT(static_cast<double>(*hi), 1.5 * mean);
}

TEST(RandomWeightsTest, RandomRoutersLoadExpertsAboutUniformly) {
  ExpectUniformLoad(testing::ReadJsonFile(kQwenConfig),
                    "model.language_model.layers.0.mlp.gate.weight", "", 256, 8, 2048,
                    /*sigmoid=*/false);
  ExpectUniformLoad(testing::ReadJsonFile(kNemotronConfig), "backbone.layers.1.mixer.gate.weight",
                    "backbone.layers.1.mixer.gate.e_score_correction_bias", 128, 6, 2688,
                    /*sigmoid=*/true);
}

}  // namespace
}  // namespace tandem::workers::cpu
