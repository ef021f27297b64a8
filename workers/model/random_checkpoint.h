#pragma once

// Random-weight models of both architectures: a measuring tool, never real answers. The same
// weights either written to disk (tandem-make-checkpoint) or generated where they are used
// (--random_weights: TensorViews with a generator; the CUDA engine fills them on the device).
// Every element comes from RandomWeight (random_weights.h), a pure function of (seed, tensor
// name, element index), so a checkpoint written with seed S loads to exactly the weights of the
// in-memory model with seed S.

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "workers/model/qwen35_moe_config.h"
#include "workers/model/random_weights.h"
#include "workers/model/safetensors.h"

namespace tandem::workers::model {

// The size of a random-weight model. Field names follow the released configs; defaults are a
// small model that runs on a CPU (hidden 256, 4 layers, 16 experts; a 2-block vision tower).
struct RandomModelOptions {
  std::string architecture = "qwen3_5_moe";  // or "nemotron_h"
  int32_t vocab_size = 512;
  int32_t hidden_size = 256;
  int32_t num_layers = 4;
  int32_t num_experts = 16;
  int32_t experts_per_token = 2;
  int32_t moe_intermediate_size = 128;
  int32_t shared_intermediate_size = 128;
  int32_t num_attention_heads = 4;
  int32_t num_kv_heads = 2;
  int32_t head_dim = 64;
  // Qwen3.5 Gated DeltaNet.
  int32_t linear_key_heads = 2;
  int32_t linear_value_heads = 4;
  int32_t linear_head_dim = 64;
  // Nemotron-H Mamba-2; the layer pattern (M Mamba, E MoE, * attention) defaults to MEM*E
  // repeated, cut to num_layers.
  int32_t mamba_heads = 8;
  int32_t mamba_head_dim = 32;
  int32_t mamba_groups = 2;
  int32_t ssm_state_size = 32;
  std::string pattern;
  int32_t max_positions = 32768;
  // End-of-sequence id written to config.json; -1 for none.
  int32_t eos_token_id = -1;
  // Qwen3.5's vision encoder (qwen3_5_moe only; ignored for nemotron_h): config.json's
  // vision_config and the model.visual.* tensors, and a preprocessor_config.json. Off: a
  // text-only checkpoint (no vision_config at all). The defaults are a tiny tower that runs
  // fast on a CPU; out_hidden_size is hidden_size.
  bool vision = true;
  int32_t vision_depth = 2;
  int32_t vision_hidden_size = 64;
  int32_t vision_heads = 2;  // head dim (hidden / heads) a multiple of 4
  int32_t vision_intermediate_size = 128;
  int32_t vision_patch_size = 16;           // pixels
  int32_t vision_temporal_patch_size = 2;   // frames per patch (an image is repeated)
  int32_t vision_merge_size = 2;            // merge x merge patches make one text token
  int32_t vision_position_embeddings = 64;  // a square: an 8 x 8 learned table
  // The ids that place an image in the text (<|vision_start|>, <|vision_end|>,
  // <|image_pad|>), written at config.json's top level; -1: the vocabulary's last three
  // (vocab_size - 3, - 2, - 1). A checkpoint with a tokenizer takes the tokenizer's
  // (VisionTokenIdsFromTokenizer).
  int32_t vision_start_token_id = -1;
  int32_t vision_end_token_id = -1;
  int32_t image_token_id = -1;
  uint64_t seed = 1;
  DType dtype = DType::kBF16;
  // > 0: shard the weights into files of about this many bytes, with an index.
  uint64_t shard_bytes = 0;
};

// One tensor of a random model: its checkpoint name, shape and generator.
struct RandomTensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  RandomFill fill;
  int64_t elements() const;
};

// The config.json of a random model of these sizes; INVALID_ARGUMENT for sizes out of range
// (the vision part is checked by qwen35::ParseVisionConfig, the engines' parser; its three
// token ids must also differ from each other and from eos_token_id).
absl::StatusOr<nlohmann::json> RandomModelConfig(const RandomModelOptions& options);

// Sets options->vision_start_token_id, vision_end_token_id and image_token_id to the ids of
// "<|vision_start|>", "<|vision_end|>" and "<|image_pad|>" in `tokenizer` (a tokenizer.json:
// its added_tokens, else model.vocab), so that the checkpoint's config places images with the
// ids the worker's tokenizer gives those tokens. NOT_FOUND naming the tokens it lacks;
// INVALID_ARGUMENT when `tokenizer` is not a tokenizer.json object.
absl::Status VisionTokenIdsFromTokenizer(const nlohmann::json& tokenizer,
                                         RandomModelOptions* options);

// The preprocessor_config.json a checkpoint of `vision` ships: the released Qwen3.5 image
// processor's values (Qwen2VLImageProcessorFast: smart_resize within [65536, 16777216] pixels,
// BICUBIC, mean = std = 0.5) with the config's patch, temporal and merge sizes.
nlohmann::json RandomPreprocessorConfig(const qwen35::VisionConfig& vision);

// Every tensor the native and CUDA engines read for the model `config` describes (config.json
// of qwen3_5_moe, qwen3_5_moe_text or nemotron_h, validated by the same parsers the engines
// use), in the released names and layouts at the config's full size, each with its generator
// for `seed`; with a vision_config, Qwen's model.visual.* tensors too (patch embedding, position
// table, blocks, merger; names and shapes as tests/golden/qwen3_5_moe_vl/tensors.txt). Scales
// keep activations finite at any width: projections (router weights, the patch embedding and
// the vision linears included, so expert load is about uniform) uniform in +-1/sqrt(fan_in);
// norms at 1 (+-0.1; stored as 0 +- 0.1 for Qwen's zero-centred (1 + w) RMSNorms; the vision
// LayerNorms are plain, at 1); biases within +-0.05; embeddings in +-1, the vision position
// table in +-0.5; the state-space parameters (A_log, dt_bias, D, conv) in ranges like the
// golden fixtures'.
absl::StatusOr<std::vector<RandomTensorSpec>> RandomTensorSpecs(const nlohmann::json& config,
                                                                uint64_t seed);

// Writes `config` (marked "tandem_random_weights": true and "tandem_random_seed") and the random
// weights RandomTensorSpecs gives for `seed` into `dir` (created if missing), generated tensor
// by tensor while writing; with a vision_config, RandomPreprocessorConfig's
// preprocessor_config.json next to config.json. The output is meaningless text; for tests,
// demos, benchmarks.
absl::Status WriteRandomWeights(const nlohmann::json& config, uint64_t seed, DType dtype,
                                uint64_t shard_bytes, const std::string& dir);

// WriteRandomWeights of RandomModelConfig(options), with the options' seed, dtype and shards.
absl::Status WriteRandomCheckpoint(const RandomModelOptions& options, const std::string& dir);

// The random model of `config_json` with `seed` as a Checkpoint of generated tensors (nothing
// is materialised until an engine reads it: the CPU reference widens each tensor to fp32, the
// CUDA upload fills device memory directly). Its config_json() carries the same
// "tandem_random_weights" / "tandem_random_seed" marks a written one does. `label` names it in
// error messages (e.g. "random weights of PATH").
absl::StatusOr<std::unique_ptr<Checkpoint>> RandomWeightsCheckpoint(const std::string& config_json,
                                                                    uint64_t seed,
                                                                    const std::string& label);

}  // namespace tandem::workers::model
