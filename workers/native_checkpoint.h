#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "workers/engine.h"
#include "workers/model/model_config.h"
#include "workers/tokenizer/tokenizer.h"
#include "workers/weights_source.h"

// What both native engines (cpu/ and cuda/) take from a checkpoint besides its weights: the
// routing name's check, the tokenizer and its stop ids, the vision token ids, what the engine
// reports. Here so that neither engine includes the other.
namespace tandem::workers {

// What a native engine (CPU or CUDA) reports: caps applied to the model's own limits; `vision`
// when it loaded an encoder (the gateway routes images only to such workers).
EngineInfo NativeEngineInfo(const model::ModelShape& shape, const std::string& model_name,
                            const std::string& model_id, int32_t max_context_tokens,
                            int32_t max_output_tokens, bool vision = false);

// INVALID_ARGUMENT (starting with `where`) unless the tokenizer's <|vision_start|>,
// <|image_pad|> and <|vision_end|> are the config's ids.
absl::Status CheckVisionTokens(const Tokenizer& tokenizer, const model::qwen35::VisionConfig& v,
                               const std::string& where);

// The tokenizer of a checkpoint (its tokenizer.json, the chat template of its architecture)
// and the ids that end a sequence (the model's EOS and the template's end-of-turn tokens).
// Checks that the model's vocabulary covers the tokenizer's.
struct CheckpointTokenizer {
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<int32_t> stop_ids;
};
absl::StatusOr<CheckpointTokenizer> LoadCheckpointTokenizer(const std::string& tokenizer_json,
                                                            const model::ModelShape& shape);

// Checks --model against the checkpoint's architecture (qwen: qwen3_5_moe, nemotron:
// nemotron_h) and fills a default model id. Random weights (config.random_weights) always show
// in the id: "random-weights/" comes before any id given.
absl::Status CheckModelName(const std::string& dir, const std::string& model_name,
                            const model::ModelConfig& config, std::string* model_id);

// What both native engines do once the weights are open and the model loaded: check the routing
// name (CheckModelName, filling `model_id`), say whether the weights are random, and load the
// tokenizer (LoadCheckpointTokenizer).
absl::StatusOr<CheckpointTokenizer> CheckNameAndLoadTokenizer(const OpenedWeights& weights,
                                                              const std::string& model_name,
                                                              std::string* model_id,
                                                              bool* random_weights);

// Whether a checkpoint's vision encoder can serve: its config has one, `has_encoder` (its
// model.visual.* tensors are there) and the tokenizer's image tokens are the config's
// (CheckVisionTokens). A mismatch is an error for a checkpoint; for random weights (a measuring
// set-up with another vocabulary's tokenizer) a warning, and text only.
absl::StatusOr<bool> VisionEncoderUsable(const model::Checkpoint& checkpoint,
                                         const model::ModelConfig& config, bool has_encoder,
                                         const Tokenizer& tokenizer);
}  // namespace tandem::workers
