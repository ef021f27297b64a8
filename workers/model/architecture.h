#pragma once

// The model architectures both engines (the CPU reference and the CUDA engine) run.

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tandem::workers::model {

enum class Architecture {
  kQwen35Moe,  // Qwen3.5-MoE text model (config.json model_type qwen3_5_moe or qwen3_5_moe_text)
  kNemotronH,  // NVIDIA Nemotron-H (model_type nemotron_h)
};

// The architecture's config.json model_type ("qwen3_5_moe", "nemotron_h"): how logs, model ids
// and tandem-make-checkpoint --arch name it.
absl::string_view ArchitectureName(Architecture architecture);

// The architecture ArchitectureName gives `name`; INVALID_ARGUMENT listing both otherwise.
absl::StatusOr<Architecture> ParseArchitecture(absl::string_view name);

}  // namespace tandem::workers::model
