#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "workers/cpu/cpu_model.h"
#include "workers/model/model_shape.h"
#include "workers/model/nemotron_h_config.h"
#include "workers/model/safetensors.h"

namespace tandem::workers::cpu {

// Loads NVIDIA Nemotron-H (config.json model_type "nemotron_h", e.g. Nemotron-3-Nano-30B-A3B):
// a hybrid of Mamba-2 (M), attention without RoPE (*), sigmoid-routed relu2 MoE (E) and dense
// relu2 MLP (-) layers, as hybrid_override_pattern lists them. Every tensor is converted to fp32
// and checked against the shape the config implies; a missing or mis-shaped tensor, or an
// unsupported config value, is an error naming it.
absl::StatusOr<std::unique_ptr<CpuModel>> LoadNemotronH(const model::Checkpoint& checkpoint,
                                                        const model::nemotron_h::Config& config,
                                                        const model::ModelShape& shape);

}  // namespace tandem::workers::cpu
