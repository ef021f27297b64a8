#pragma once

// A checkpoint's config.json, parsed once for every consumer: the CPU reference, the CUDA
// engine, the random-weights generator and the worker's checks.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "workers/model/architecture.h"
#include "workers/model/model_shape.h"
#include "workers/model/nemotron_h_config.h"
#include "workers/model/qwen35_moe_config.h"

namespace tandem::workers::model {

struct ModelConfig {
  // shape.architecture says which of `hyperparameters` is held.
  ModelShape shape;
  std::variant<qwen35::TextConfig, nemotron_h::Config> hyperparameters;
  // config.json says tandem-make-checkpoint or --random_weights made the weights
  // ("tandem_random_weights": true): the model's answers are meaningless.
  bool random_weights = false;
  // qwen3_5_moe's vision_config, when the config has one. Whether the checkpoint holds the
  // encoder's tensors (model.visual.*) is the engine's to check: a text checkpoint may keep the
  // released config.
  std::optional<qwen35::VisionConfig> vision;

  Architecture architecture() const { return shape.architecture; }
};

// Parses a config.json as the releases write it: Python's json module writes non-finite floats
// as bare Infinity, -Infinity and NaN (Nemotron-3-Nano's "time_step_limit": [0.0, Infinity]),
// which JSON has not; outside strings they are read as 1e308, -1e308 and null. A discarded
// value when the text is not JSON even so.
nlohmann::json ParseConfigJson(absl::string_view text);

// Validates `config` (a config.json) by its model_type: qwen3_5_moe (with its nested
// text_config), qwen3_5_moe_text or nemotron_h. Errors start with `where` (the checkpoint
// directory) and name the field; another model_type or a quantization it does not read
// (quantization.h) is UNIMPLEMENTED.
absl::StatusOr<ModelConfig> ParseModelConfig(const nlohmann::json& config,
                                             const std::string& where);
// The same from config.json's text.
absl::StatusOr<ModelConfig> ParseModelConfigText(absl::string_view config_json,
                                                 const std::string& where);

}  // namespace tandem::workers::model
