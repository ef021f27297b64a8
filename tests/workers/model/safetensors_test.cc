#include "workers/model/safetensors.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/temp_path.h"
#include "tests/support/test_paths.h"
#include "workers/cpu/cpu_model.h"
#include "workers/model/checkpoint_writer.h"
#include "workers/model/random_checkpoint.h"

namespace tandem::workers::model {
namespace {

using ::testing::HasSubstr;

std::string TempDir(const std::string& name) {
  const std::string d = tandem::testing::TempPath(name);
  std::error_code error;
  EXPECT_TRUE(std::filesystem::create_directory(d, error)) << d << ": " << error.message();
  return d;
}

TEST(SafetensorsTest, ReadsTheGoldenFixtureAndChecksShapes) {
  auto c = Checkpoint::Open(tandem::testing::SourcePath("/tests/golden/qwen3_5_moe"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_GT((*c)->tensor_count(), 100u);
  auto emb = (*c)->GetFloat("model.language_model.embed_tokens.weight", {512, 64});
  ASSERT_TRUE(emb.ok()) << emb.status();
  EXPECT_EQ(emb->size(), 512u * 64u);
  auto wrong = (*c)->Get("lm_head.weight", {512, 32});
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(wrong.status().message()),
              HasSubstr("lm_head.weight has shape [512, 64], the config implies [512, 32]"));
  auto missing = (*c)->Get("model.language_model.layers.99.mlp.gate.weight", {8, 64});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("missing tensor model.language_model.layers.99.mlp.gate.weight"));
}

TEST(SafetensorsTest, Bf16RoundTripsThroughTheWriterAndShards) {
  const std::string dir = TempDir("sharded");
  std::vector<TensorData> t = {{"a", {2, 3}, {1.0f, -2.5f, 0.15625f, 3e-3f, 1e8f, -0.0f}},
                               {"b", {4}, {0.1f, 0.2f, 0.3f, 0.4f}}};
  ASSERT_TRUE(WriteSafetensors(dir, t, DType::kBF16, /*shard_bytes=*/8).ok());
  std::ofstream(dir + "/config.json") << "{}";
  auto c = Checkpoint::Open(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  auto a = (*c)->Get("a", {2, 3});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->dtype, DType::kBF16);
  const auto v = (*a)->ToFloat();
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], -2.5f);
  EXPECT_EQ(v[2], 0.15625f);  // exactly representable
  EXPECT_NEAR(v[3], 3e-3f, 3e-3f / 128);
  EXPECT_NEAR(v[4], 1e8f, 1e8f / 128);
  EXPECT_NEAR((*(*c)->GetFloat("b", {4}))[2], 0.3f, 0.3f / 128);
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ((*a)->Element(i), v[i]) << i;
}

// A missing config.json says what the directory lacks; one that is there but cannot be read
// says why, not that it is missing.
TEST(SafetensorsTest, AConfigThatCannotBeReadIsNotReportedMissing) {
  const std::string dir = TempDir("no_config");
  auto missing = Checkpoint::Open(dir);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("no config.json"));
  std::filesystem::create_directory(dir + "/config.json");
  auto unreadable = Checkpoint::Open(dir);
  EXPECT_FALSE(unreadable.ok());
  EXPECT_NE(unreadable.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(unreadable.status().message()), HasSubstr("config.json: "));
}

TEST(SafetensorsTest, MalformedFilesAreRefusedWithTheReason) {
  const std::string dir = TempDir("bad");
  std::ofstream(dir + "/config.json") << "{}";
  auto write = [&](const std::string& header, size_t data_bytes) {
    std::ofstream out(dir + "/model.safetensors", std::ios::binary);
    const uint64_t len = header.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out << header << std::string(data_bytes, '\0');
  };
  write(R"({"w":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})", 4);
  auto q = Checkpoint::Open(dir);
  EXPECT_EQ(q.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(q.status().message()), HasSubstr("has dtype I8"));
  write(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}})", 8);
  EXPECT_THAT(std::string(Checkpoint::Open(dir).status().message()),
              HasSubstr("8 bytes for F32 [4]"));
  write(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
        R"("v":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
        12);
  EXPECT_THAT(std::string(Checkpoint::Open(dir).status().message()), HasSubstr("overlap"));
  write(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 4);
  EXPECT_THAT(std::string(Checkpoint::Open(dir).status().message()), HasSubstr("out of range"));
  write("not json", 0);
  EXPECT_THAT(std::string(Checkpoint::Open(dir).status().message()), HasSubstr("not a JSON"));
  EXPECT_EQ(Checkpoint::Open(dir + "/nope").status().code(), absl::StatusCode::kNotFound);
}

TEST(RandomCheckpointTest, WritesBothArchitecturesInTheRealLayout) {
  for (const char* arch : {"qwen3_5_moe", "nemotron_h"}) {
    const std::string dir = TempDir(arch);
    RandomModelOptions o;
    o.architecture = arch;
    o.hidden_size = 64;
    o.num_layers = 5;
    o.num_experts = 4;
    o.moe_intermediate_size = 32;
    o.shared_intermediate_size = 32;
    o.head_dim = 32;
    o.linear_head_dim = 16;
    o.mamba_head_dim = 8;
    o.ssm_state_size = 16;
    ASSERT_TRUE(WriteRandomCheckpoint(o, dir).ok()) << arch;
    auto c = Checkpoint::Open(dir);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_THAT((*c)->config_json(), HasSubstr(arch));
    EXPECT_TRUE((*c)->Has("lm_head.weight"));
    if (std::string(arch) == "qwen3_5_moe") {
      EXPECT_TRUE(
          (*c)->Get("model.language_model.layers.3.self_attn.q_proj.weight", {256, 64}).ok());
      EXPECT_TRUE(
          (*c)->Get("model.language_model.layers.0.mlp.experts.gate_up_proj", {4, 64, 64}).ok());
    } else {
      EXPECT_TRUE((*c)->Get("backbone.layers.0.mixer.in_proj.weight", {64 + 128 + 8, 64}).ok());
      EXPECT_TRUE((*c)->Get("backbone.layers.1.mixer.experts.3.up_proj.weight", {32, 64}).ok());
    }
  }
}

TEST(LoadNativeModelTest, UnknownArchitecturesAndQuantizedCheckpointsAreRefused) {
  const std::string dir = TempDir("arch");
  ASSERT_TRUE(WriteSafetensors(dir, {{"w", {1}, {1.0f}}}, DType::kF32).ok());
  std::ofstream(dir + "/config.json") << R"({"model_type": "llama"})";
  auto c = Checkpoint::Open(dir);
  ASSERT_TRUE(c.ok());
  auto m = cpu::LoadCpuModel(**c);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(m.status().message()),
              HasSubstr("model_type 'llama' is not supported; the native engine runs "
                        "qwen3_5_moe and nemotron_h"));
  std::ofstream(dir + "/config.json")
      << R"({"model_type": "nemotron_h", "quantization_config": {"quant_method": "bitsandbytes"}})";
  c = Checkpoint::Open(dir);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("quant_method 'bitsandbytes'"));
  // Both shipped architectures load from the golden fixtures through the same entry point.
  for (const char* arch : {"qwen3_5_moe", "nemotron_h"}) {
    auto g = Checkpoint::Open(tandem::testing::SourcePath("/tests/golden/") + arch);
    ASSERT_TRUE(g.ok());
    auto model = cpu::LoadCpuModel(**g);
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ(ArchitectureName((*model)->shape().architecture), arch);
    EXPECT_EQ((*model)->shape().vocab_size, 512);
  }
}

}  // namespace
}  // namespace tandem::workers::model
