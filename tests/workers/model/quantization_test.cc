// Block FP8 (Qwen3.5's FP8 release layout) read through its scales, against vectors written by an
// independent numpy implementation of the format (quant_vectors/make_vectors.py, from the
// specifications, not from this code): every E4M3 code, partial last blocks, BF16, F16 and F32
// scales, bit for bit. And the refusals: a quantized weight is never read as raw codes.
#include "workers/model/quantization.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/temp_path.h"
#include "tests/support/test_paths.h"
#include "workers/model/checkpoint_writer.h"
#include "workers/model/safetensors.h"

namespace tandem::workers::model {
namespace {

using ::testing::HasSubstr;

std::string Vectors() {
  return tandem::testing::SourcePath("/tests/workers/model/quant_vectors/fp8_block");
}
std::string ModelOptVectors() {
  return tandem::testing::SourcePath("/tests/workers/model/quant_vectors/modelopt_fp8");
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TEST(QuantizationTest, BlockFp8DequantizesBitForBitAsTheIndependentVectorsSay) {
  auto c = Checkpoint::Open(Vectors());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->quantization().method, QuantScheme::Method::kFp8Block);
  EXPECT_EQ((*c)->quantization().Describe(), "fp8 (e4m3, 128x128 blocks)");
  for (const auto& [name, shape] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
           {"codes", {2, 128}}, {"w", {129, 130}}, {"v", {2, 129}}, {"u", {129, 2}}}) {
    auto got = (*c)->GetFloat(name + ".weight", shape);
    ASSERT_TRUE(got.ok()) << got.status();
    auto want = (*c)->GetFloat(name + ".expected", shape);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_EQ(got->size(), want->size());
    int nan = 0;
    for (size_t i = 0; i < got->size(); ++i) {
      if (std::isnan((*want)[i])) {
        EXPECT_TRUE(std::isnan((*got)[i])) << name << " " << i;
        ++nan;
        continue;
      }
      ASSERT_EQ(Bits((*got)[i]), Bits((*want)[i])) << name << " element " << i;
    }
    EXPECT_EQ(nan, name == "codes" ? 2 : 0) << "S.1111.111 is NaN, nothing else";
  }
  EXPECT_EQ(F8E4M3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(F8E4M3ToFloat(0x01), std::ldexp(1.0f, -9));
}

TEST(QuantizationTest, AQuantizedWeightIsNeverReadAsRawCodes) {
  auto c = Checkpoint::Open(Vectors());
  ASSERT_TRUE(c.ok()) << c.status();
  auto orphan = (*c)->GetFloat("orphan.weight", {4, 4});
  EXPECT_EQ(orphan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(orphan.status().message()),
              HasSubstr("orphan.weight is F8_E4M3 and has no orphan.weight_scale_inv"));
  // Engines that read tensors as stored (the CUDA upload) are refused them, naming the format.
  auto raw = (*c)->Get("w.weight", {129, 130});
  EXPECT_EQ(raw.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(raw.status().message()), HasSubstr("quantized (F8_E4M3, fp8"));
  EXPECT_TRUE((*c)->Get("w.expected", {129, 130}).ok());
  // A scale whose shape is not one per block.
  std::vector<TensorView> tensors;
  for (const char* name : {"w.weight", "v.weight_scale_inv"}) {
    TensorView t = *(*c)->tensors().at(name);
    t.name = name == std::string("w.weight") ? "x.weight" : "x.weight_scale_inv";
    tensors.push_back(t);
  }
  auto mixed = Checkpoint::FromTensors("mixed", (*c)->config_json(), tensors);
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  auto wrong = (*mixed)->GetFloat("x.weight", {129, 130});
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("x.weight_scale_inv has shape"));
  // F8 codes without a block FP8 config to say how they are scaled.
  auto unscaled = Checkpoint::FromTensors("unscaled", R"({"model_type": "qwen3_5_moe"})", tensors);
  ASSERT_TRUE(unscaled.ok());
  EXPECT_THAT(std::string((*unscaled)->GetFloat("x.weight", {129, 130}).status().message()),
              HasSubstr("no block FP8 quantization_config"));
}

TEST(QuantizationTest, ModelOptFp8DequantizesBitForBitWithEitherScaleShape) {
  auto c = Checkpoint::Open(ModelOptVectors());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->quantization().Name(), "modelopt-fp8");
  for (const auto& [name, shape] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
           {"m", {3, 130}}, {"n", {130, 3}}}) {
    auto got = (*c)->GetFloat(name + ".weight", shape);
    ASSERT_TRUE(got.ok()) << got.status();
    auto want = (*c)->GetFloat(name + ".expected", shape);
    ASSERT_TRUE(want.ok()) << want.status();
    for (size_t i = 0; i < got->size(); ++i) {
      ASSERT_EQ(Bits((*got)[i]), Bits((*want)[i])) << name << " element " << i;
    }
  }
  EXPECT_THAT(std::string((*c)->GetFloat("orphan.weight", {4, 4}).status().message()),
              HasSubstr("has no orphan.weight_scale"));
  EXPECT_EQ((*c)->Get("m.weight", {3, 130}).status().code(), absl::StatusCode::kFailedPrecondition);
  // Releases made with ModelOpt 0.29 and before say it in hf_quant_config.json instead.
  const std::string dir = tandem::testing::TempPath("hf_quant_config");
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(ModelOptVectors() + "/model.safetensors", dir + "/model.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir + "/config.json") << R"({"model_type": "nemotron_h"})";
  std::ofstream(dir + "/hf_quant_config.json")
      << R"({"producer": {"name": "modelopt", "version": "0.29.0"}, "quantization": )"
      << R"({"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]}})";
  auto hf = Checkpoint::Open(dir);
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ((*hf)->quantization().method, QuantScheme::Method::kModelOptFp8);
  EXPECT_TRUE((*hf)->quantization().kv_cache_fp8);
  EXPECT_TRUE((*hf)->GetFloat("m.weight", {3, 130}).ok());
  std::ofstream(dir + "/hf_quant_config.json")
      << R"({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4"}})";
  EXPECT_THAT(std::string(Checkpoint::Open(dir).status().message()),
              HasSubstr("ModelOpt quant_algo \"NVFP4\""));
}

TEST(QuantizationTest, GptqAwqAndCompressedTensorsInt4DequantizeBitForBit) {
  // GPTQ v1: asymmetric, zero points stored minus one, groups through a desc_act g_idx
  // permutation. v2: symmetric, zero points as they are, groups in order with a partial last
  // one. AWQ: its interleaved nibble order, zero points as they are, a partial last group.
  // compressed-tensors: symmetric by group through an actorder g_idx with BF16 scales, and
  // asymmetric by channel with F16 scales and sizes 8 does not divide; in the scale's dtype.
  for (const auto& [folder, out, in, describe] :
       std::vector<std::tuple<std::string, int64_t, int64_t, std::string>>{
           {"gptq_v1", 16, 64, "gptq int4 (groups of 32, v1, asym, desc_act)"},
           {"gptq_v2", 24, 72, "gptq int4 (groups of 32, v2, sym)"},
           {"awq", 24, 72, "awq int4 (groups of 32, gemm)"},
           {"ct_sym", 16, 64, "compressed-tensors int4 (groups of 32, sym, actorder)"},
           {"ct_asym", 12, 20, "compressed-tensors int4 (per channel, asym)"}}) {
    auto c = Checkpoint::Open(
        tandem::testing::SourcePath("/tests/workers/model/quant_vectors/" + folder));
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ((*c)->quantization().Describe(), describe);
    auto got = (*c)->GetFloat("x.weight", {out, in});
    ASSERT_TRUE(got.ok()) << got.status();
    auto want = (*c)->GetFloat("x.expected", {out, in});
    ASSERT_TRUE(want.ok()) << want.status();
    for (size_t i = 0; i < got->size(); ++i) {
      ASSERT_EQ(Bits((*got)[i]), Bits((*want)[i])) << folder << " element " << i;
    }
    // Widened, the packed weight is out x in fp32 (a row padded to 8 codes at most); the rest 1
    // each: never counted short, so the memory check before a load does not pass a model the
    // machine cannot hold.
    uint64_t others = 0;
    for (const auto& [name, t] : (*c)->tensors()) {
      if (name != "x.qweight" && name != "x.weight_packed") others += t->elements() * 4;
    }
    EXPECT_GE((*c)->float_bytes(), others + static_cast<uint64_t>(out * in) * 4) << folder;
    EXPECT_LE((*c)->float_bytes(), others + static_cast<uint64_t>(out * ((in + 7) / 8 * 8)) * 4)
        << folder;
    // Read as stored (the CUDA upload) it is refused, as every quantized tensor is.
    EXPECT_EQ((*c)->Get("x.weight", {out, in}).status().code(),
              absl::StatusCode::kFailedPrecondition);
    // A shape the config does not imply is named.
    EXPECT_THAT(std::string((*c)->GetFloat("x.weight", {out, in + 8}).status().message()),
                HasSubstr("the config implies"));
  }
}

TEST(QuantizationTest, HalfConversionsRoundToNearestEven) {
  // Every finite half converts back to itself; a value halfway between two neighbours goes to
  // the one with the even bit pattern; past the largest half it is infinity.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;  // infinities and NaNs
    const float f = F16ToFloat(static_cast<uint16_t>(h));
    ASSERT_EQ(FloatToF16(f), h) << h;
    if ((h & 0x7fff) == 0x7bff) continue;  // the largest: no next one
    const float mid = (f + F16ToFloat(static_cast<uint16_t>(h + 1))) / 2;
    ASSERT_EQ(FloatToF16(mid), (h & 1) == 0 ? h : h + 1) << h;
  }
  EXPECT_EQ(FloatToF16(65520.0f), 0x7c00);
  EXPECT_EQ(FloatToF16(-1e9f), 0xfc00);
  EXPECT_EQ(FloatToF16(std::nanf("")) & 0x7e00, 0x7e00);
}

TEST(QuantizationTest, ConfigsAreReadOrRefusedNamingTheField) {
  using Json = nlohmann::json;
  EXPECT_EQ(ParseQuantization(Json::object())->method, QuantScheme::Method::kNone);
  Json c = {{"quantization_config",
             {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {128, 64}}}}};
  auto ok = ParseQuantization(c);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->block_rows, 128);
  EXPECT_EQ(ok->block_cols, 64);
  const std::vector<std::pair<Json, std::string>> bad = {
      {{{"quant_method", "fp8"}, {"fmt", "e5m2"}, {"weight_block_size", {128, 128}}}, "fmt"},
      {{{"quant_method", "fp8"}, {"activation_scheme", "static"}, {"weight_block_size", {1, 1}}},
       "activation_scheme"},
      {{{"quant_method", "fp8"}, {"weight_block_size", {128}}}, "weight_block_size"},
      {{{"quant_method", "fp8"}, {"weight_block_size", {0, 128}}}, "weight_block_size"},
      {{{"quant_method", "compressed-tensors"}, {"format", "marlin-24"}}, "pack-quantized"},
      {{{"quant_method", "bitsandbytes"}}, "quant_method 'bitsandbytes'"},
      {{{"quant_method", "modelopt"}, {"quant_algo", "W4A16_AWQ"}}, "quant_algo"},
      {{{"quant_method", "gptq"}, {"bits", 8}}, "bits 8"},
      {{{"quant_method", "gptq"}, {"group_size", 0}}, "group_size"},
      {{{"quant_method", "gptq"}, {"checkpoint_format", "marlin"}}, "checkpoint_format"},
      {{{"quant_method", "awq"}, {"version", "gemv"}}, "GEMM packing"},
      {{{"bits", 4}}, "quant_method missing"},
      {Json("fp8"), "must be an object"}};
  for (const auto& [q, field] : bad) {
    auto s = ParseQuantization(Json{{"quantization_config", q}});
    EXPECT_FALSE(s.ok()) << q.dump();
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(field)) << q.dump();
  }
}

}  // namespace
}  // namespace tandem::workers::model
