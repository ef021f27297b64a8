#include "workers/native_checkpoint.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"
#include "workers/tokenizer/bpe_tokenizer.h"
#include "workers/tokenizer/chat_template.h"

namespace tandem::workers {
namespace {

// The routing name (--model) each architecture serves under.
std::optional<model::Architecture> ArchitectureOfModelName(absl::string_view model_name) {
  if (model_name == "qwen") return model::Architecture::kQwen35Moe;
  if (model_name == "nemotron") return model::Architecture::kNemotronH;
  return std::nullopt;
}

ChatFamily ChatFamilyOf(model::Architecture architecture) {
  switch (architecture) {
    case model::Architecture::kQwen35Moe:
      return ChatFamily::kQwen35;
    case model::Architecture::kNemotronH:
      return ChatFamily::kNemotronH;
  }
  return ChatFamily::kQwen35;
}

}  // namespace

EngineInfo NativeEngineInfo(const model::ModelShape& shape, const std::string& model_name,
                            const std::string& model_id, int32_t max_context_tokens,
                            int32_t max_output_tokens, bool vision) {
  EngineInfo info;
  info.engine = "native";
  info.model_name = model_name;
  info.model_id = model_id;
  info.vision = vision;
  info.reasoning = true;
  info.max_context_tokens = max_context_tokens > 0
                                ? std::min(max_context_tokens, shape.max_positions)
                                : shape.max_positions;
  info.max_output_tokens = max_output_tokens > 0
                               ? std::min(max_output_tokens, info.max_context_tokens)
                               : info.max_context_tokens;
  return info;
}

absl::Status CheckVisionTokens(const Tokenizer& tokenizer, const model::qwen35::VisionConfig& v,
                               const std::string& where) {
  const std::pair<const char*, int32_t> tokens[] = {{"<|vision_start|>", v.vision_start_token_id},
                                                    {"<|image_pad|>", v.image_token_id},
                                                    {"<|vision_end|>", v.vision_end_token_id}};
  for (const auto& [text, id] : tokens) {
    if (tokenizer.SpecialTokenId(text) != id) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": config.json says ", text, " is token ", id,
                       " but the tokenizer has it as ", tokenizer.SpecialTokenId(text),
                       " (-1: missing); the vision encoder needs the two to agree"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointTokenizer> LoadCheckpointTokenizer(const std::string& tokenizer_json,
                                                            const model::ModelShape& shape) {
  auto bpe = BpeTokenizer::Load(tokenizer_json);
  if (!bpe.ok()) return bpe.status();
  if ((*bpe)->VocabSize() > shape.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(tokenizer_json, " has ", (*bpe)->VocabSize(),
                                                   " tokens but the model's vocabulary is ",
                                                   shape.vocab_size));
  }
  auto tokenizer = ModelTokenizer::Create(std::shared_ptr<const BpeTokenizer>(std::move(*bpe)),
                                          ChatFamilyOf(shape.architecture));
  if (!tokenizer.ok()) return tokenizer.status();
  CheckpointTokenizer out;
  out.stop_ids = shape.eos_token_ids;
  for (int32_t id : (*tokenizer)->stop_token_ids()) {
    if (std::find(out.stop_ids.begin(), out.stop_ids.end(), id) == out.stop_ids.end()) {
      out.stop_ids.push_back(id);
    }
  }
  out.tokenizer = std::move(*tokenizer);
  return out;
}

absl::Status CheckModelName(const std::string& dir, const std::string& model_name,
                            const model::ModelConfig& config, std::string* model_id) {
  const absl::string_view architecture = model::ArchitectureName(config.architecture());
  const std::optional<model::Architecture> expected = ArchitectureOfModelName(model_name);
  if (expected != config.architecture()) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, " holds a ", architecture, " model, but --model=", model_name, " expects ",
        expected.has_value() ? model::ArchitectureName(*expected)
                             : "qwen (qwen3_5_moe) or nemotron (nemotron_h)"));
  }
  if (model_id->empty()) {
    *model_id = config.random_weights ? absl::StrCat("random-weights/", architecture)
                                      : absl::StrCat("local/", architecture);
  } else if (config.random_weights && !absl::StartsWith(*model_id, "random-weights/")) {
    *model_id = absl::StrCat("random-weights/", *model_id);
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointTokenizer> CheckNameAndLoadTokenizer(const OpenedWeights& weights,
                                                              const std::string& model_name,
                                                              std::string* model_id,
                                                              bool* random_weights) {
  const model::ModelConfig& config = weights.config;
  if (absl::Status s = CheckModelName(weights.checkpoint->dir(), model_name, config, model_id);
      !s.ok()) {
    return s;
  }
  *random_weights = config.random_weights;
  return LoadCheckpointTokenizer(weights.tokenizer_json, config.shape);
}

absl::StatusOr<bool> VisionEncoderUsable(const model::Checkpoint& checkpoint,
                                         const model::ModelConfig& config, bool has_encoder,
                                         const Tokenizer& tokenizer) {
  if (!config.vision.has_value() || !has_encoder) return false;
  const absl::Status ids = CheckVisionTokens(tokenizer, *config.vision, checkpoint.dir());
  if (ids.ok()) return true;
  if (!config.random_weights) return ids;
  spdlog::warn("{}; serving text only (vision=false)", std::string(ids.message()));
  return false;
}

}  // namespace tandem::workers
