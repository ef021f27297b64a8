// ParseModelConfig: one parse of config.json for both engines (architecture, shape, the
// random-weights mark), and the architecture names.

#include "workers/model/model_config.h"

#include <nlohmann/json.hpp>
#include <string>
#include <variant>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "workers/model/architecture.h"
#include "workers/model/random_checkpoint.h"

namespace tandem::workers::model {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

Json SmallConfig(const std::string& architecture) {
  RandomModelOptions o;
  o.architecture = architecture;
  auto config = RandomModelConfig(o);
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : Json();
}

TEST(ArchitectureTest, NamesRoundTrip) {
  for (const Architecture a : {Architecture::kQwen35Moe, Architecture::kNemotronH}) {
    auto parsed = ParseArchitecture(ArchitectureName(a));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, a);
  }
  EXPECT_EQ(ArchitectureName(Architecture::kQwen35Moe), "qwen3_5_moe");
  EXPECT_EQ(ArchitectureName(Architecture::kNemotronH), "nemotron_h");
  // model_type values other than the names (qwen3_5_moe_text) are config.json's business.
  EXPECT_THAT(std::string(ParseArchitecture("qwen3_5_moe_text").status().message()),
              HasSubstr("expected qwen3_5_moe or nemotron_h"));
}

TEST(ModelConfigTest, BothArchitecturesParseToTheirShape) {
  for (const std::string arch : {"qwen3_5_moe", "nemotron_h"}) {
    auto config = ParseModelConfig(SmallConfig(arch), "dir");
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(ArchitectureName(config->architecture()), arch);
    EXPECT_EQ(config->shape.vocab_size, 512);
    EXPECT_EQ(config->shape.hidden_size, 256);
    EXPECT_EQ(config->shape.num_layers, 4);
    EXPECT_GT(config->shape.kv_bytes_per_token, 0);
    EXPECT_GT(config->shape.state_bytes, 0);
    EXPECT_FALSE(config->random_weights);
    EXPECT_EQ(std::holds_alternative<qwen35::TextConfig>(config->hyperparameters),
              arch == "qwen3_5_moe");
  }
  // A bare text config is the same architecture, its tensors not nested.
  const Json text = SmallConfig("qwen3_5_moe")["text_config"];
  auto config = ParseModelConfig(text, "dir");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture(), Architecture::kQwen35Moe);
  EXPECT_FALSE(std::get<qwen35::TextConfig>(config->hyperparameters).composite);
}

TEST(ModelConfigTest, ConfigsAsPythonWritesThemParse) {
  // Nemotron-3-Nano's released config.json has "time_step_limit": [0.0, Infinity]: Python's
  // json writes non-finite floats that way, and JSON parsers refuse them.
  Json config = SmallConfig("nemotron_h");
  std::string text = config.dump();
  text.insert(text.size() - 1, R"(,"time_step_limit":[0.0,Infinity],"low":-Infinity,"x":NaN,)"
                               R"("note":"Infinity \"NaN\" stays")");
  EXPECT_TRUE(Json::parse(text, nullptr, false).is_discarded()) << "not JSON as written";
  const Json parsed = ParseConfigJson(text);
  ASSERT_FALSE(parsed.is_discarded());
  EXPECT_EQ(parsed["time_step_limit"][1], 1e308);
  EXPECT_EQ(parsed["low"], -1e308);
  EXPECT_TRUE(parsed["x"].is_null());
  EXPECT_EQ(parsed["note"], "Infinity \"NaN\" stays");
  EXPECT_TRUE(ParseModelConfigText(text, "dir").ok());
}

TEST(ModelConfigTest, RandomWeightsMarkIsReadFromTheJson) {
  Json config = SmallConfig("nemotron_h");
  config["tandem_random_weights"] = true;
  // However the JSON is laid out: compact, indented, or with the mark first.
  for (const std::string& text : {config.dump(), config.dump(2), config.dump(4)}) {
    auto parsed = ParseModelConfigText(text, "dir");
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_TRUE(parsed->random_weights) << text;
  }
  config["tandem_random_weights"] = false;
  EXPECT_FALSE(ParseModelConfig(config, "dir")->random_weights);
  // The mark's text inside another field is not the mark.
  config.erase("tandem_random_weights");
  config["note"] = "\"tandem_random_weights\": true";
  EXPECT_FALSE(ParseModelConfig(config, "dir")->random_weights);
  config["tandem_random_weights"] = "yes";
  EXPECT_THAT(std::string(ParseModelConfig(config, "dir").status().message()),
              HasSubstr("tandem_random_weights"));
}

TEST(ModelConfigTest, ErrorsNameTheDirectoryAndTheProblem) {
  auto not_json = ParseModelConfigText("{", "/ckpt");
  EXPECT_EQ(not_json.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(not_json.status().message()),
              HasSubstr("/ckpt: config.json is not a JSON object"));
  auto llama = ParseModelConfig(Json{{"model_type", "llama"}}, "/ckpt");
  EXPECT_EQ(llama.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(llama.status().message()), HasSubstr("model_type 'llama'"));
  Json quantized = SmallConfig("qwen3_5_moe");
  quantized["quantization_config"] = {{"quant_method", "bitsandbytes"}};
  auto awq = ParseModelConfig(quantized, "/ckpt");
  EXPECT_EQ(awq.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(awq.status().message()), HasSubstr("quant_method 'bitsandbytes'"));
  quantized["quantization_config"] = {{"quant_method", "fp8"}};
  EXPECT_THAT(std::string(ParseModelConfig(quantized, "/ckpt").status().message()),
              HasSubstr("quantization_config.weight_block_size: missing"));
  quantized["quantization_config"]["weight_block_size"] = {128, 128};
  EXPECT_TRUE(ParseModelConfig(quantized, "/ckpt").ok());
  Json bad = SmallConfig("qwen3_5_moe");
  bad["text_config"].erase("hidden_size");
  EXPECT_THAT(std::string(ParseModelConfig(bad, "/ckpt").status().message()),
              HasSubstr("/ckpt: config.text_config.hidden_size"));
}

}  // namespace
}  // namespace tandem::workers::model
