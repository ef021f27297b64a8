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

}  // namespace

absl::StatusOr<OpenedWeights> OpenWeights(const WeightsSource& source) {
  OpenedWeights out;
  auto checkpoint = OpenCheckpoint(source, &out);
  if (!checkpoint.ok()) return checkpoint.status();
  out.checkpoint = std::move(*checkpoint);
  auto config = model::ParseModelConfigText(out.checkpoint->config_json(), out.checkpoint->dir());
  if (!config.ok()) return config.status();
  out.config = std::move(*config);
  return out;
}

}  // namespace tandem::workers
