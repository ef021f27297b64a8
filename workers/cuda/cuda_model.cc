#include "workers/cuda/cuda_model.h"

#include <variant>

#include "absl/status/status.h"
#include "workers/cuda/model_common.h"

namespace tandem::workers::cuda {

absl::StatusOr<std::unique_ptr<CudaModel>> LoadCudaModel(const native::Checkpoint& checkpoint,
                                                         const native::ModelConfig& config) {
  switch (config.architecture()) {
    case native::Architecture::kQwen35Moe:
      return LoadCudaQwen35Moe(
          checkpoint, std::get<native::qwen35::TextConfig>(config.hyperparameters), config.shape);
    case native::Architecture::kNemotronH:
      return LoadCudaNemotronH(
          checkpoint, std::get<native::nemotron_h::Config>(config.hyperparameters), config.shape);
  }
  return absl::InternalError("unknown architecture");
}

absl::StatusOr<std::unique_ptr<CudaModel>> LoadCudaModel(const native::Checkpoint& checkpoint) {
  absl::StatusOr<native::ModelConfig> config =
      native::ParseModelConfigText(checkpoint.config_json(), checkpoint.dir());
  if (!config.ok()) return config.status();
  return LoadCudaModel(checkpoint, *config);
}

}  // namespace tandem::workers::cuda
