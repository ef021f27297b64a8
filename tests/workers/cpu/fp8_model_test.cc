// A tiny random Qwen3.5 written in the layout of Qwen's block-FP8 release (per-expert tensors,
// F8_E4M3 weights with BF16 block scales) and as GPTQ int4, and a tiny Nemotron-H in the layout of
// NVIDIA's ModelOpt FP8 release (per-tensor scales), each run in the CPU engine exactly as the same
// model with those weights dequantized into F32 in the BF16 release's layout: the same logits bit
// for bit, prefill and decode. The dequantization itself is checked against independent vectors
// (quantization_test); this checks which tensors are quantized and how the loader puts them
// together.
#include <cstring>
#include <filesystem>

#include "gtest/gtest.h"
#include "tests/support/temp_path.h"
#include "workers/cpu/cpu_model.h"
#include "workers/model/quantized_checkpoint.h"
#include "workers/model/random_checkpoint.h"

namespace tandem::workers::model {
namespace {

std::string FreshDir(const std::string& name) {
  const std::string d = tandem::testing::TempPath(name);
  std::filesystem::remove_all(d);
  return d;
}

// A tiny random model of `arch` (4 layers: Gated DeltaNet and attention, or MEM*; 4 experts
// 48 wide), written into a fresh `name` folder and opened.
absl::StatusOr<std::unique_ptr<Checkpoint>> Source(const std::string& arch,
                                                   const std::string& name) {
  RandomModelOptions o;
  o.architecture = arch;
  o.hidden_size = 64;
  o.num_layers = 4;
  o.num_experts = 4;
  o.moe_intermediate_size = 48;
  o.shared_intermediate_size = 32;
  o.head_dim = 32;
  o.linear_head_dim = 16;
  o.mamba_head_dim = 8;
  o.ssm_state_size = 16;
  o.vision = false;
  const std::string dir = FreshDir(name);
  std::filesystem::create_directories(dir);
  if (absl::Status s = WriteRandomCheckpoint(o, dir); !s.ok()) return s;
  return Checkpoint::Open(dir);
}

// The models in `quantized_dir` and `reference_dir` give the same logits, bit for bit, over a
// prefill and 32 greedy steps.
void ExpectSameModel(const std::string& quantized_dir, const std::string& reference_dir) {
  auto fp8 = Checkpoint::Open(quantized_dir);
  ASSERT_TRUE(fp8.ok()) << fp8.status();
  auto reference = Checkpoint::Open(reference_dir);
  ASSERT_TRUE(reference.ok()) << reference.status();
  auto a = cpu::LoadCpuModel(**fp8);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = cpu::LoadCpuModel(**reference);
  ASSERT_TRUE(b.ok()) << b.status();
  auto sa = (*a)->NewState(), sb = (*b)->NewState();
  std::vector<int32_t> tokens = {1, 17, 300, 42, 5, 99, 256, 7, 64, 3, 11, 400};
  for (int step = 0; step < 33; ++step) {
    std::vector<float> la, lb;
    ASSERT_TRUE((*a)->Forward(sa.get(), tokens, /*all_logits=*/step == 0, &la).ok());
    ASSERT_TRUE((*b)->Forward(sb.get(), tokens, /*all_logits=*/step == 0, &lb).ok());
    ASSERT_EQ(la.size(), lb.size());
    ASSERT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0)
        << (step == 0 ? "prefill" : "decode step ") << step;
    // Greedy: the next input is the argmax.
    const size_t vocab = la.size() / (step == 0 ? tokens.size() : 1);
    const float* last = la.data() + la.size() - vocab;
    tokens = {static_cast<int32_t>(std::max_element(last, last + vocab) - last)};
  }
}

TEST(Fp8BlockModelTest, TheFp8LayoutRunsAsItsDequantizedModel) {
  // moe_intermediate 48 is not a multiple of the 32-row blocks: partial blocks.
  auto source = Source("qwen3_5_moe", "fp8_source");
  ASSERT_TRUE(source.ok()) << source.status();
  const std::string fp8_dir = FreshDir("fp8"), reference_dir = FreshDir("fp8_dequantized");
  ASSERT_TRUE(WriteFp8BlockCheckpoint(**source, fp8_dir, /*block=*/32, reference_dir).ok());

  auto fp8 = Checkpoint::Open(fp8_dir);
  ASSERT_TRUE(fp8.ok()) << fp8.status();
  EXPECT_EQ((*fp8)->quantization().Describe(), "fp8 (e4m3, 32x32 blocks)");
  const std::string layer = "model.language_model.layers.3.";
  const auto& t = (*fp8)->tensors();
  EXPECT_EQ(t.at(layer + "self_attn.q_proj.weight")->dtype, DType::kF8E4M3);
  EXPECT_EQ(t.at(layer + "mlp.experts.3.down_proj.weight")->dtype, DType::kF8E4M3);
  EXPECT_EQ(t.at(layer + "mlp.experts.3.down_proj.weight_scale_inv")->shape,
            (std::vector<int64_t>{2, 2}));
  EXPECT_FALSE((*fp8)->Has(layer + "mlp.experts.gate_up_proj")) << "split per expert";
  EXPECT_EQ(t.at(layer + "mlp.gate.weight")->dtype, DType::kBF16) << "the router stays";
  EXPECT_EQ(t.at("lm_head.weight")->dtype, DType::kBF16);

  ExpectSameModel(fp8_dir, reference_dir);
}

TEST(Fp8BlockModelTest, TheGptqLayoutRunsAsItsDequantizedModel) {
  // Groups of 32: the down projections' last group (of 48 inputs) is partial.
  auto source = Source("qwen3_5_moe", "gptq_source");
  ASSERT_TRUE(source.ok()) << source.status();
  const std::string gptq_dir = FreshDir("gptq"), reference_dir = FreshDir("gptq_ref");
  ASSERT_TRUE(WriteGptqCheckpoint(**source, gptq_dir, /*group=*/32, reference_dir).ok());
  auto gptq = Checkpoint::Open(gptq_dir);
  ASSERT_TRUE(gptq.ok()) << gptq.status();
  EXPECT_EQ((*gptq)->quantization().Name(), "gptq-int4");
  const std::string layer = "model.language_model.layers.1.";
  EXPECT_TRUE((*gptq)->Has(layer + "mlp.experts.3.down_proj.qweight"));
  EXPECT_TRUE((*gptq)->Has(layer + "mlp.shared_expert.up_proj.qzeros"));
  EXPECT_TRUE((*gptq)->Has(layer + "linear_attn.in_proj_qkv.weight")) << "attention stays";
  ExpectSameModel(gptq_dir, reference_dir);
}

TEST(Fp8BlockModelTest, TheAwqLayoutRunsAsItsDequantizedModel) {
  auto source = Source("qwen3_5_moe", "awq_source");
  ASSERT_TRUE(source.ok()) << source.status();
  const std::string awq_dir = FreshDir("awq"), reference_dir = FreshDir("awq_ref");
  ASSERT_TRUE(WriteAwqCheckpoint(**source, awq_dir, /*group=*/32, reference_dir).ok());
  auto awq = Checkpoint::Open(awq_dir);
  ASSERT_TRUE(awq.ok()) << awq.status();
  EXPECT_EQ((*awq)->quantization().Name(), "awq-int4");
  const std::string layer = "model.language_model.layers.2.";
  EXPECT_EQ((*awq)->tensors().at(layer + "mlp.experts.1.gate_proj.qweight")->shape,
            (std::vector<int64_t>{64, 48 / 8}))
      << "[in, out/8]";
  ExpectSameModel(awq_dir, reference_dir);
}

TEST(Fp8BlockModelTest, TheCompressedTensorsLayoutRunsAsItsDequantizedModel) {
  // Groups of 32: the down projections' second group (of 48 inputs) is partial.
  auto source = Source("qwen3_5_moe", "ct_source");
  ASSERT_TRUE(source.ok()) << source.status();
  const std::string ct_dir = FreshDir("ct"), reference_dir = FreshDir("ct_ref");
  ASSERT_TRUE(WriteCompressedTensorsCheckpoint(**source, ct_dir, /*group=*/32, reference_dir).ok());
  auto ct = Checkpoint::Open(ct_dir);
  ASSERT_TRUE(ct.ok()) << ct.status();
  EXPECT_EQ((*ct)->quantization().Name(), "ct-int4");
  const std::string layer = "model.language_model.layers.0.";
  EXPECT_EQ((*ct)->tensors().at(layer + "mlp.experts.0.down_proj.weight_scale")->shape,
            (std::vector<int64_t>{64, 2}));
  EXPECT_TRUE((*ct)->Has(layer + "mlp.experts.0.down_proj.weight_shape"));
  ExpectSameModel(ct_dir, reference_dir);
}

TEST(Fp8BlockModelTest, TheModelOptFp8LayoutRunsAsItsDequantizedModel) {
  // Its pattern MEM*: the Mamba layer before the attention one stays BF16.
  auto source = Source("nemotron_h", "modelopt_source");
  ASSERT_TRUE(source.ok()) << source.status();
  const std::string fp8_dir = FreshDir("modelopt"), reference_dir = FreshDir("modelopt_ref");
  ASSERT_TRUE(WriteModelOptFp8Checkpoint(**source, fp8_dir, reference_dir).ok());
  auto fp8 = Checkpoint::Open(fp8_dir);
  ASSERT_TRUE(fp8.ok()) << fp8.status();
  EXPECT_EQ((*fp8)->quantization().Name(), "modelopt-fp8");
  const auto& t = (*fp8)->tensors();
  EXPECT_EQ(t.at("backbone.layers.0.mixer.in_proj.weight")->dtype, DType::kF8E4M3);
  EXPECT_EQ(t.at("backbone.layers.1.mixer.experts.2.down_proj.weight")->dtype, DType::kF8E4M3);
  EXPECT_EQ(t.at("backbone.layers.2.mixer.in_proj.weight")->dtype, DType::kBF16)
      << "the Mamba layer feeding attention stays";
  EXPECT_EQ(t.at("backbone.layers.3.mixer.q_proj.weight")->dtype, DType::kBF16);
  EXPECT_TRUE((*fp8)->Has("backbone.layers.3.mixer.k_proj.k_scale"));
  ExpectSameModel(fp8_dir, reference_dir);
}

}  // namespace
}  // namespace tandem::workers::model
