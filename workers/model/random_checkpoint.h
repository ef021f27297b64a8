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
#include "workers/model/random_weights.h"
#include "workers/model/safetensors.h"

namespace tandem::workers::model {

// The size of a random-weight model. Field names follow the released configs; defaults are a
// small model that runs on a CPU (hidden 256, 4 layers, 16 experts).
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

// The config.json of a random model of these sizes; INVALID_ARGUMENT for sizes out of range.
absl::StatusOr<nlohmann::json> RandomModelConfig(const RandomModelOptions& options);

// Every tensor the native and CUDA engines read for the model `config` describes (config.json
// of qwen3_5_moe, qwen3_5_moe_text or nemotron_h, validated by the same parsers the engines
// use), in the released names and layouts at the config's full size, each with its generator
// for `seed`. Scales keep activations finite at any width: projections (router weights
// included, so expert load is about uniform) uniform in +-1/sqrt(fan_in); norms at 1 (+-0.1;
// stored as 0 +- 0.1 for Qwen's zero-centred (1 + w) norms); embeddings in +-1; the state-space
// parameters (A_log, dt_bias, D, conv) in ranges like the golden fixtures'.
absl::StatusOr<std::vector<RandomTensorSpec>> RandomTensorSpecs(const nlohmann::json& config,
                                                                uint64_t seed);

// Writes `config` (marked "tandem_random_weights": true and "tandem_random_seed") and the random
// weights RandomTensorSpecs gives for `seed` into `dir` (created if missing), generated tensor
// by tensor while writing. The output is meaningless text; for tests, demos, benchmarks.
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
