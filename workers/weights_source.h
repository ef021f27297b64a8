#pragma once

// Where a native engine's (CPU or CUDA) weights come from: a checkpoint directory, or
// (--random_weights) weights generated from a config.json alone, a measuring tool.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "workers/model/model_config.h"
#include "workers/model/safetensors.h"
#include "workers/vision/image_preprocessor.h"

namespace tandem::workers {

struct WeightsSource {
  // A checkpoint directory: config.json, safetensors (single or sharded), tokenizer.json.
  std::string checkpoint;
  // Instead: the model `model_config` (a config.json) describes, built at its full size with
  // every tensor generated from `seed` (model/random_checkpoint.h). Router weights are random
  // too, so expert load is about uniform: speed measured this way is that of uniform routing.
  bool random_weights = false;
  std::string model_config;
  uint64_t seed = 1;
  // tokenizer.json; empty: the checkpoint's, or the one next to model_config.
  std::string tokenizer;
};

struct OpenedWeights {
  // Tensors memory-mapped from files, or generated where they are read (the CPU reference
  // widens each to fp32; the CUDA upload fills device memory directly, never host memory).
  std::unique_ptr<model::Checkpoint> checkpoint;
  // Its config.json, parsed once for the engine: the model to build, the shape, and whether the
  // weights are random (a generated checkpoint always says so).
  model::ModelConfig config;
  std::string tokenizer_json;  // path
  // The image processor's settings: the checkpoint's preprocessor_config.json (for generated
  // weights, the one next to model_config), else the released defaults with the vision config's
  // patch, temporal and merge sizes. Meaningful only when config.vision is set.
  vision::PreprocessorConfig preprocessor;
};

// Opens the checkpoint, or builds the generated one, and parses its config. Errors name the path
// or the config field.
absl::StatusOr<OpenedWeights> OpenWeights(const WeightsSource& source);

}  // namespace tandem::workers
