#include "workers/cuda/cuda_model.h"

#include <variant>

#include "absl/status/status.h"
#include "workers/cuda/model_common.h"

namespace tandem::workers::cuda {

absl::StatusOr<std::unique_ptr<CudaModel>> LoadCudaModel(const model::Checkpoint& checkpoint,
                                                         const model::ModelConfig& config) {
  switch (config.architecture()) {
    case model::Architecture::kQwen35Moe:
      return LoadCudaQwen35Moe(
          checkpoint, std::get<model::qwen35::TextConfig>(config.hyperparameters), config.shape);
    case model::Architecture::kNemotronH:
      return LoadCudaNemotronH(
          checkpoint, std::get<model::nemotron_h::Config>(config.hyperparameters), config.shape);
  }
  return absl::InternalError("unknown architecture");
}

absl::StatusOr<std::unique_ptr<CudaModel>> LoadCudaModel(const model::Checkpoint& checkpoint) {
  absl::StatusOr<model::ModelConfig> config =
      model::ParseModelConfigText(checkpoint.config_json(), checkpoint.dir());
  if (!config.ok()) return config.status();
  return LoadCudaModel(checkpoint, *config);
}

}  // namespace tandem::workers::cuda
