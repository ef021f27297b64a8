#pragma once

#include <memory>
#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "workers/native/native_model.h"
#include "workers/native/safetensors.h"

namespace tandem::workers::native {

// Loads NVIDIA Nemotron-H (config.json model_type "nemotron_h", e.g. Nemotron-3-Nano-30B-A3B):
// a hybrid of Mamba-2 (M), attention without RoPE (*), sigmoid-routed relu2 MoE (E) and dense
// relu2 MLP (-) layers, as hybrid_override_pattern lists them. Every tensor is converted to fp32
// and checked against the shape the config implies; a missing or mis-shaped tensor, or an
// unsupported config value, is an error naming it.
absl::StatusOr<std::unique_ptr<NativeModel>> LoadNemotronH(const Checkpoint& checkpoint,
                                                           const nlohmann::json& config);

}  // namespace tandem::workers::native
