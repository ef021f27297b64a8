// The fp32 Nemotron-H forward pass against the golden reference logits of the tiny random model
// in tests/golden/nemotron_h (see tests/golden/MANIFEST.md), plus its load and input errors.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tests/support/golden_files.h"
#include "tests/support/model_shape.h"
#include "tests/support/numerics.h"
#include "tests/support/temp_path.h"
#include "tests/support/test_paths.h"
#include "workers/cpu/cpu_model.h"
#include "workers/model/model_config.h"
#include "workers/model/safetensors.h"

namespace tandem::workers::cpu {
namespace {

using Json = nlohmann::json;

const std::string kGoldenDir = tandem::testing::SourcePath("/tests/golden/nemotron_h");
// Acceptance from MANIFEST.md: |logit diff| <= 1e-4; argmax compared where the margin > 1e-3.
constexpr double kTolerance = 1e-4;
constexpr double kArgmaxMargin = 1e-3;

// The model `config` describes, with the tensors of `checkpoint`.
absl::StatusOr<std::unique_ptr<CpuModel>> LoadWithConfig(const model::Checkpoint& checkpoint,
                                                         const Json& config) {
  absl::StatusOr<model::ModelConfig> parsed = model::ParseModelConfig(config, checkpoint.dir());
  if (!parsed.ok()) return parsed.status();
  return LoadCpuModel(checkpoint, *parsed);
}

// The golden checkpoint, its config, the model and the cases, loaded once.
struct Golden {
  std::unique_ptr<model::Checkpoint> checkpoint;
  Json config;
  std::unique_ptr<CpuModel> model;
  Json cases;
  std::string error;
};

const Golden& GetGolden() {
  static const Golden* golden = [] {
    auto* g = new Golden();
    auto ck = model::Checkpoint::Open(kGoldenDir);
    if (!ck.ok()) {
      g->error = ck.status().ToString();
      return g;
    }
    g->checkpoint = std::move(*ck);
    g->config = Json::parse(g->checkpoint->config_json(), nullptr, false);
    auto model = LoadWithConfig(*g->checkpoint, g->config);
    if (!model.ok()) {
      g->error = model.status().ToString();
      return g;
    }
    g->model = std::move(*model);
    const Json all = testing::ReadJsonFile(std::string(kGoldenDir) + "/cases.json");
    if (all.is_discarded() || !all.contains("cases")) {
      g->error = "cannot parse cases.json";
      return g;
    }
    g->cases = all["cases"];
    return g;
  }();
  return *golden;
}

// One position's logits: row `row` of `logits`, `vocab` wide.
absl::Span<const float> Row(const std::vector<float>& logits, int64_t row, int64_t vocab) {
  return absl::MakeConstSpan(logits.data() + row * vocab, vocab);
}

#define REQUIRE_GOLDEN(g) ASSERT_TRUE((g).error.empty()) << (g).error

// One golden case, as the case loops below read it.
struct GoldenCase {
  const Json& c;  // its cases.json entry
  std::string name;
  std::vector<int32_t> prompt;
};

// Runs `check` on every golden case under SCOPED_TRACE(name), stopping at a fatal failure.
void ForEachCase(const Golden& g, const std::function<void(const GoldenCase&)>& check) {
  for (const Json& c : g.cases) {
    const auto [name, prompt] = testing::NameAndPrompt(c);
    const GoldenCase gc{c, name, prompt};
    SCOPED_TRACE(gc.name);
    check(gc);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(NativeNemotronTest, ShapeFromConfig) {
  const Golden& g = GetGolden();
  REQUIRE_GOLDEN(g);
  const model::ModelShape& s = g.model->shape();
  // KV bytes per token: 2 attention layers x K,V x 2 kv heads x 16 dims x 4 bytes. State bytes:
  // 4 Mamba layers x (conv 128 ch x 4 taps + ssm 8 heads x 8 dims x 16 states) x 4 bytes.
  testing::ExpectShape(s, {model::Architecture::kNemotronH, 512, 64, 10, 4096, 2 * 2 * 2 * 16 * 4,
                           4 * (128 * 4 + 8 * 8 * 16) * 4});
  EXPECT_EQ(s.eos_token_ids, std::vector<int32_t>{2});
}

// (a) The whole prompt in one call: the stored positions' logits and every confident argmax.
TEST(NativeNemotronTest, PrefillMatchesGolden) {
  const Golden& g = GetGolden();
  REQUIRE_GOLDEN(g);
  const int64_t vocab = g.model->shape().vocab_size;
  ASSERT_EQ(g.cases.size(), 4u);
  ForEachCase(g, [&](const GoldenCase& gc) {
    const std::vector<int32_t>& prompt = gc.prompt;
    auto state = g.model->NewState();
    std::vector<float> logits;
    ASSERT_TRUE(g.model->Forward(state.get(), prompt, /*all_logits=*/true, &logits).ok());
    ASSERT_EQ(logits.size(), prompt.size() * vocab);
    EXPECT_EQ(state->position(), static_cast<int64_t>(prompt.size()));
    const Json& pre = gc.c["prefill"];
    double err = 0;
    for (size_t i = 0; i < pre["logits_positions"].size(); ++i) {
      const int64_t pos = pre["logits_positions"][i].get<int64_t>();
      err = std::max<double>(
          err, testing::MaxAbsDiff(Row(logits, pos, vocab), testing::JsonFloats(pre["logits"][i])));
    }
    int checked = 0;
    for (size_t pos = 0; pos < prompt.size(); ++pos) {
      if (pre["top2_margin"][pos].get<double>() <= kArgmaxMargin) continue;
      ++checked;
      EXPECT_EQ(testing::Argmax(Row(logits, pos, vocab)), pre["argmax"][pos].get<int32_t>())
          << "position " << pos;
    }
    std::printf("[%s] prefill max abs err %.3g (%zu positions), argmax checked at %d/%zu\n",
                gc.name.c_str(), err, pre["logits_positions"].size(), checked, prompt.size());
    EXPECT_LE(err, kTolerance);
  });
}

// (b) The prompt one token per call, state carried: the same logits as the prefill.
TEST(NativeNemotronTest, StepwiseMatchesPrefill) {
  const Golden& g = GetGolden();
  REQUIRE_GOLDEN(g);
  ForEachCase(g, [&](const GoldenCase& gc) {
    const int64_t vocab = g.model->shape().vocab_size;
    std::vector<float> full;
    auto prefill_state = g.model->NewState();
    ASSERT_TRUE(g.model->Forward(prefill_state.get(), gc.prompt, true, &full).ok());

    const Json& pre = gc.c["prefill"];
    std::map<int64_t, size_t> stored;  // position -> row of the golden logits
    for (size_t i = 0; i < pre["logits_positions"].size(); ++i) {
      stored[pre["logits_positions"][i].get<int64_t>()] = i;
    }
    auto state = g.model->NewState();
    double err_golden = 0, err_prefill = 0;
    for (size_t pos = 0; pos < gc.prompt.size(); ++pos) {
      std::vector<float> step;
      ASSERT_TRUE(
          g.model->Forward(state.get(), {gc.prompt[pos]}, /*all_logits=*/false, &step).ok());
      ASSERT_EQ(step.size(), static_cast<size_t>(vocab));
      err_prefill = std::max<double>(err_prefill, testing::MaxAbsDiff(step, Row(full, pos, vocab)));
      if (auto it = stored.find(pos); it != stored.end()) {
        err_golden = std::max<double>(
            err_golden, testing::MaxAbsDiff(step, testing::JsonFloats(pre["logits"][it->second])));
      }
    }
    std::printf("[%s] stepwise max abs err vs golden %.3g, vs own prefill %.3g\n", gc.name.c_str(),
                err_golden, err_prefill);
    EXPECT_LE(err_golden, kTolerance);
    EXPECT_LE(err_prefill, kTolerance);
  });
}

// (c) 8 greedy tokens from the prefill state, one per call.
TEST(NativeNemotronTest, GreedyDecodeMatchesGolden) {
  const Golden& g = GetGolden();
  REQUIRE_GOLDEN(g);
  ForEachCase(g, [&](const GoldenCase& gc) {
    const std::vector<int32_t> want = testing::JsonInts(gc.c["greedy"]["generated_ids"]);
    const Json& want_logits = gc.c["greedy"]["decode_logits"];
    ASSERT_EQ(want.size(), 8u);
    ASSERT_EQ(want_logits.size(), 8u);
    auto state = g.model->NewState();
    std::vector<float> logits;
    ASSERT_TRUE(g.model->Forward(state.get(), gc.prompt, /*all_logits=*/false, &logits).ok());
    std::vector<int32_t> got = {static_cast<int32_t>(testing::Argmax(logits))};
    double err = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_TRUE(g.model->Forward(state.get(), {got[i]}, false, &logits).ok());
      err = std::max<double>(err, testing::MaxAbsDiff(logits, testing::JsonFloats(want_logits[i])));
      if (i + 1 < want.size()) got.push_back(static_cast<int32_t>(testing::Argmax(logits)));
    }
    std::printf("[%s] decode max abs err %.3g over %zu steps\n", gc.name.c_str(), err, want.size());
    EXPECT_EQ(got, want);
    EXPECT_LE(err, kTolerance);
    EXPECT_EQ(state->position(), static_cast<int64_t>(gc.prompt.size() + want.size()));
  });
}

TEST(NativeNemotronTest, OutOfRangeTokenIsInvalidArgument) {
  const Golden& g = GetGolden();
  REQUIRE_GOLDEN(g);
  auto state = g.model->NewState();
  std::vector<float> logits;
  for (int32_t bad : {512, -1}) {
    const absl::Status s = g.model->Forward(state.get(), {1, bad}, false, &logits);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(std::to_string(bad)), std::string::npos) << s;
  }
  EXPECT_EQ(state->position(), 0);  // a refused call leaves the state untouched
  EXPECT_EQ(g.model->Forward(state.get(), {}, false, &logits).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NativeNemotronTest, FullContextIsInvalidArgument) {
  const Golden& g = GetGolden();
  REQUIRE_GOLDEN(g);
  Json config = g.config;
  config["max_position_embeddings"] = 4;
  auto model = LoadWithConfig(*g.checkpoint, config);
  ASSERT_TRUE(model.ok()) << model.status();
  auto state = (*model)->NewState();
  std::vector<float> logits;
  ASSERT_TRUE((*model)->Forward(state.get(), {1, 2, 3}, false, &logits).ok());
  ASSERT_TRUE((*model)->Forward(state.get(), {4}, false, &logits).ok());
  const absl::Status s = (*model)->Forward(state.get(), {5}, false, &logits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("max_position_embeddings"), std::string::npos) << s;
}

TEST(NativeNemotronTest, UnknownPatternLetterIsClearError) {
  const Golden& g = GetGolden();
  REQUIRE_GOLDEN(g);
  Json config = g.config;
  config["hybrid_override_pattern"] = "MEM*XMEM*E";
  auto model = LoadWithConfig(*g.checkpoint, config);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(model.status().message());
  EXPECT_NE(msg.find("hybrid_override_pattern"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'X'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("layer 4"), std::string::npos) << msg;
}

TEST(NativeNemotronTest, BadConfigFieldsAreClearErrors) {
  const Golden& g = GetGolden();
  REQUIRE_GOLDEN(g);
  struct BadField {
    const char* key;
    Json value;
  };
  const std::vector<BadField> bad = {{"vocab_size", "512"},
                                     {"mamba_num_heads", nullptr},
                                     {"n_groups", 3},
                                     {"num_hidden_layers", 11},
                                     {"mlp_hidden_act", "silu"}};
  for (const BadField& b : bad) {
    Json config = g.config;
    config[b.key] = b.value;
    auto model = LoadWithConfig(*g.checkpoint, config);
    ASSERT_FALSE(model.ok()) << b.key;
    EXPECT_NE(model.status().message().find(b.key), std::string::npos) << model.status();
  }
}

// A copy of the golden checkpoint with its tensors edited, in a temp directory.
class EditedCheckpoint {
 public:
  struct Tensor {
    std::vector<int64_t> shape;
    std::vector<float> values;
  };

  explicit EditedCheckpoint(const std::string& name) : dir_(tandem::testing::TempPath(name)) {
    std::filesystem::create_directories(dir_);
    auto file = model::SafetensorsFile::Open(std::string(kGoldenDir) + "/model.safetensors");
    EXPECT_TRUE(file.ok()) << file.status();
    if (!file.ok()) return;
    for (const auto& [n, t] : (*file)->tensors()) tensors_[n] = {t.shape, t.ToFloat()};
  }

  std::map<std::string, Tensor>& tensors() { return tensors_; }
  const std::string& dir() const { return dir_; }

  // Writes config.json (the golden one unless `config` is given) and model.safetensors (8-byte
  // LE header length, JSON header padded to a multiple of 8, then the F32 data in sorted-name
  // order).
  void Write(const Json* config = nullptr) const {
    Json header = Json::object();
    header["__metadata__"] = {{"format", "pt"}};
    uint64_t offset = 0;
    for (const auto& [n, t] : tensors_) {
      const uint64_t bytes = t.values.size() * sizeof(float);
      header[n] = {
          {"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
      offset += bytes;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    std::ofstream out(dir_ + "/model.safetensors", std::ios::binary | std::ios::trunc);
    const uint64_t len = text.size();  // little-endian host
    out.write(reinterpret_cast<const char*>(&len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& [n, t] : tensors_) {
      out.write(reinterpret_cast<const char*>(t.values.data()),
                static_cast<std::streamsize>(t.values.size() * sizeof(float)));
    }
    std::ofstream(dir_ + "/config.json")
        << (config != nullptr ? config->dump()
                              : testing::ReadFileText(std::string(kGoldenDir) + "/config.json"));
  }

 private:
  std::string dir_;
  std::map<std::string, Tensor> tensors_;
};

absl::StatusOr<std::unique_ptr<CpuModel>> LoadDir(const std::string& dir,
                                                  std::unique_ptr<model::Checkpoint>* keep) {
  auto ck = model::Checkpoint::Open(dir);
  if (!ck.ok()) return ck.status();
  *keep = std::move(*ck);
  return LoadWithConfig(**keep, Json::parse((*keep)->config_json(), nullptr, false));
}

TEST(NativeNemotronTest, UneditedCopyLoadsAndMatches) {
  // Guards the two tests below: the writer itself produces a loadable, identical checkpoint.
  const Golden& g = GetGolden();
  REQUIRE_GOLDEN(g);
  EditedCheckpoint copy("nemotron_copy");
  copy.Write();
  std::unique_ptr<model::Checkpoint> ck;
  auto model = LoadDir(copy.dir(), &ck);
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<float> a, b;
  auto sa = (*model)->NewState();
  auto sb = g.model->NewState();
  ASSERT_TRUE((*model)->Forward(sa.get(), {5, 6, 7}, true, &a).ok());
  ASSERT_TRUE(g.model->Forward(sb.get(), {5, 6, 7}, true, &b).ok());
  EXPECT_EQ(a, b);
}

TEST(NativeNemotronTest, MissingTensorIsNamed) {
  EditedCheckpoint copy("nemotron_missing");
  const std::string name = "backbone.layers.4.mixer.experts.3.down_proj.weight";
  ASSERT_EQ(copy.tensors().erase(name), 1u);
  copy.Write();
  std::unique_ptr<model::Checkpoint> ck;
  auto model = LoadDir(copy.dir(), &ck);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kNotFound) << model.status();
  EXPECT_NE(model.status().message().find(name), std::string::npos) << model.status();
}

TEST(NativeNemotronTest, MisShapedTensorNamesBothShapes) {
  EditedCheckpoint copy("nemotron_misshaped");
  const std::string name = "backbone.layers.2.mixer.in_proj.weight";
  ASSERT_EQ(copy.tensors().count(name), 1u);
  copy.tensors()[name].shape = {100, 128};  // same element count as [200, 64]
  copy.Write();
  std::unique_ptr<model::Checkpoint> ck;
  auto model = LoadDir(copy.dir(), &ck);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument) << model.status();
  const std::string msg(model.status().message());
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_NE(msg.find("[100, 128]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[200, 64]"), std::string::npos) << msg;
}

TEST(NativeNemotronTest, TiedEmbeddingsUseTheEmbeddingAsLmHead) {
  const Golden& g = GetGolden();
  REQUIRE_GOLDEN(g);
  // Untied, with lm_head set to the embedding, vs tied without any lm_head: the same logits.
  EditedCheckpoint untied("nemotron_untied");
  untied.tensors()["lm_head.weight"] = untied.tensors()["backbone.embeddings.weight"];
  untied.Write();
  EditedCheckpoint tied("nemotron_tied");
  ASSERT_EQ(tied.tensors().erase("lm_head.weight"), 1u);
  Json config = g.config;
  config["tie_word_embeddings"] = true;
  tied.Write(&config);
  std::unique_ptr<model::Checkpoint> ck_untied, ck_tied;
  auto a = LoadDir(untied.dir(), &ck_untied);
  auto b = LoadDir(tied.dir(), &ck_tied);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  std::vector<float> la, lb;
  auto sa = (*a)->NewState();
  auto sb = (*b)->NewState();
  ASSERT_TRUE((*a)->Forward(sa.get(), {9, 8, 7, 6}, true, &la).ok());
  ASSERT_TRUE((*b)->Forward(sb.get(), {9, 8, 7, 6}, true, &lb).ok());
  EXPECT_EQ(la, lb);
}

TEST(NativeNemotronTest, StateFromAnotherModelIsRefused) {
  const Golden& g = GetGolden();
  REQUIRE_GOLDEN(g);
  auto other = LoadWithConfig(*g.checkpoint, g.config);
  ASSERT_TRUE(other.ok());
  auto state = (*other)->NewState();
  std::vector<float> logits;
  EXPECT_EQ(g.model->Forward(state.get(), {1}, false, &logits).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::workers::cpu
