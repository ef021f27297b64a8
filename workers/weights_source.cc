#include "workers/weights_source.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "workers/model/random_checkpoint.h"

namespace tandem::workers {
namespace {

// The checkpoint of `source`; out->tokenizer_json too.
absl::StatusOr<std::unique_ptr<model::Checkpoint>> OpenCheckpoint(const WeightsSource& source,
                                                                  OpenedWeights* out) {
  if (!source.random_weights) {
    if (source.checkpoint.empty()) {
      return absl::InvalidArgumentError("no checkpoint directory given (--checkpoint=DIR)");
    }
    out->tokenizer_json =
        source.tokenizer.empty() ? source.checkpoint + "/tokenizer.json" : source.tokenizer;
    return model::Checkpoint::Open(source.checkpoint);
  }
  if (source.model_config.empty()) {
    return absl::InvalidArgumentError(
        "random weights need a config.json (--model_config=PATH, e.g. "
        "workers/model/configs/qwen3_5_moe/config.json)");
  }
  // Checked before any weights are built: a missing tokenizer fails in milliseconds.
  out->tokenizer_json =
      source.tokenizer.empty()
          ? (std::filesystem::path(source.model_config).parent_path() / "tokenizer.json").string()
          : source.tokenizer;
  if (!std::filesystem::is_regular_file(out->tokenizer_json)) {
    return absl::NotFoundError(absl::StrCat(
        "random weights: no tokenizer at ", out->tokenizer_json,
        "; pass --tokenizer=PATH (a tokenizer.json whose vocabulary fits the model's, e.g. "
        "tests/tokenizer/qwen3/tokenizer.json for qwen3_5_moe)"));
  }
  std::ifstream in(source.model_config, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", source.model_config));
  std::stringstream text;
  text << in.rdbuf();
  return model::RandomWeightsCheckpoint(
      text.str(), source.seed,
      absl::StrCat("random weights (seed ", source.seed, ") of ", source.model_config));
}

// The image processor settings for `config` (see OpenedWeights::preprocessor).
absl::StatusOr<vision::PreprocessorConfig> LoadPreprocessor(const std::string& dir,
                                                            const model::ModelConfig& config) {
  vision::PreprocessorConfig out;
  if (!config.vision.has_value()) return out;
  out.patch_size = static_cast<int32_t>(config.vision->patch_size);
  out.temporal_patch_size = static_cast<int32_t>(config.vision->temporal_patch_size);
  out.merge_size = static_cast<int32_t>(config.vision->spatial_merge_size);
  const std::filesystem::path path = std::filesystem::path(dir) / "preprocessor_config.json";
  if (dir.empty() || !std::filesystem::is_regular_file(path)) return out;
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json json = nlohmann::json::parse(text.str(), nullptr, false);
  if (json.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), " is not valid JSON"));
  }
  auto parsed = vision::ParsePreprocessorConfig(json);
  if (!parsed.ok()) {
    return absl::Status(parsed.status().code(),
                        absl::StrCat(path.string(), ": ", parsed.status().message()));
  }
  if (parsed->patch_size != out.patch_size ||
      parsed->temporal_patch_size != out.temporal_patch_size ||
      parsed->merge_size != out.merge_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(path.string(),
                     ": patch_size, temporal_patch_size and merge_size must equal the model's "
                     "vision_config (",
                     out.patch_size, ", ", out.temporal_patch_size, ", ", out.merge_size, ")"));
  }
  return *parsed;
}

}  // namespace

absl::StatusOr<OpenedWeights> OpenWeights(const WeightsSource& source) {
  OpenedWeights out;
  auto checkpoint = OpenCheckpoint(source, &out);
  if (!checkpoint.ok()) return checkpoint.status();
  out.checkpoint = std::move(*checkpoint);
  auto config = model::ParseModelConfigText(out.checkpoint->config_json(), out.checkpoint->dir());
  if (!config.ok()) return config.status();
  out.config = std::move(*config);
  const std::string preprocessor_dir =
      source.random_weights ? std::filesystem::path(source.model_config).parent_path().string()
                            : source.checkpoint;
  auto preprocessor = LoadPreprocessor(preprocessor_dir, out.config);
  if (!preprocessor.ok()) return preprocessor.status();
  out.preprocessor = *preprocessor;
  return out;
}

}  // namespace tandem::workers
