#include "workers/cuda/cuda_model.h"

#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "workers/cuda/model_common.h"

namespace tandem::workers::cuda {

// Dispatches on config.json's model_type exactly as native::LoadNativeModel does.
absl::StatusOr<std::unique_ptr<CudaModel>> LoadCudaModel(const native::Checkpoint& checkpoint) {
  const nlohmann::json config =
      nlohmann::json::parse(checkpoint.config_json(), nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(checkpoint.dir(), "/config.json is not a JSON object"));
  }
  if (config.contains("quantization_config")) {
    return absl::UnimplementedError(
        absl::StrCat(checkpoint.dir(),
                     ": quantized checkpoints (quantization_config in config.json) are not "
                     "supported yet; use the BF16 release"));
  }
  const std::string type = config.value("model_type", std::string());
  if (type == "qwen3_5_moe" || type == "qwen3_5_moe_text") {
    return LoadCudaQwen35Moe(checkpoint, config);
  }
  if (type == "nemotron_h") return LoadCudaNemotronH(checkpoint, config);
  return absl::UnimplementedError(
      absl::StrCat(checkpoint.dir(), ": model_type '", type,
                   "' is not supported; the CUDA engine runs qwen3_5_moe and nemotron_h"));
}

}  // namespace tandem::workers::cuda
