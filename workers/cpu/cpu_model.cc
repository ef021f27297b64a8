#include "workers/cpu/cpu_model.h"

#include <variant>

#include "absl/strings/str_cat.h"
#include "workers/cpu/nemotron_h_model.h"
#include "workers/cpu/qwen35_moe_model.h"

namespace tandem::workers::cpu {

absl::StatusOr<std::unique_ptr<CpuModel>> LoadCpuModel(const model::Checkpoint& checkpoint,
                                                       const model::ModelConfig& config) {
  switch (config.architecture()) {
    case model::Architecture::kQwen35Moe:
      return LoadQwen35Moe(checkpoint, std::get<model::qwen35::TextConfig>(config.hyperparameters),
                           config.shape);
    case model::Architecture::kNemotronH:
      return LoadNemotronH(checkpoint, std::get<model::nemotron_h::Config>(config.hyperparameters),
                           config.shape);
  }
  return absl::InternalError("unknown architecture");
}

absl::StatusOr<std::unique_ptr<CpuModel>> LoadCpuModel(const model::Checkpoint& checkpoint) {
  absl::StatusOr<model::ModelConfig> config =
      model::ParseModelConfigText(checkpoint.config_json(), checkpoint.dir());
  if (!config.ok()) return config.status();
  return LoadCpuModel(checkpoint, *config);
}

absl::Status CheckForwardInput(const model::ModelShape& shape, int64_t position,
                               absl::Span<const int32_t> tokens, const std::vector<float>* logits) {
  const absl::string_view who = model::ArchitectureName(shape.architecture);
  if (logits == nullptr) return absl::InvalidArgumentError(absl::StrCat(who, ": logits is null"));
  if (tokens.empty()) return absl::InvalidArgumentError(absl::StrCat(who, ": no tokens to feed"));
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= shape.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": token ", i, " has id ", tokens[i],
                                                     ", outside the vocabulary [0, ",
                                                     shape.vocab_size, ")"));
    }
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (position + n > shape.max_positions) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": ", position, " tokens in context plus ",
                                                   n, " new exceed max_position_embeddings ",
                                                   shape.max_positions));
  }
  return absl::OkStatus();
}

}  // namespace tandem::workers::cpu
