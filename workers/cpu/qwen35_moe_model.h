#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "workers/cpu/cpu_model.h"
#include "workers/model/model_shape.h"
#include "workers/model/qwen35_moe_config.h"
#include "workers/model/safetensors.h"

namespace tandem::workers::cpu {

// Loads the text model of Qwen3.5-MoE (model_type qwen3_5_moe with its nested text_config, or a
// bare qwen3_5_moe_text config) as an fp32 CPU reference: hybrid Gated DeltaNet / gated full
// attention layers, each followed by a sparse MoE with a gated shared expert. Every config field
// is validated and every tensor is loaded against the shape the config implies; vision
// (model.visual.*) and MTP (mtp.*) tensors are ignored.
absl::StatusOr<std::unique_ptr<CpuModel>> LoadQwen35Moe(const model::Checkpoint& checkpoint,
                                                        const model::qwen35::TextConfig& config,
                                                        const model::ModelShape& shape);

}  // namespace tandem::workers::cpu
