#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "workers/native/safetensors.h"

namespace tandem::workers::native {

// What the engine needs to know about a loaded model.
struct ModelShape {
  std::string architecture;  // config.json model_type: "qwen3_5_moe" or "nemotron_h"
  int32_t vocab_size = 0;
  int32_t hidden_size = 0;
  int32_t num_layers = 0;
  int32_t max_positions = 0;
  // Memory per sequence, as in model_spec.md section 3 (fp32 here): KV cache bytes per token of
  // context (attention layers only), and the fixed recurrent + conv state bytes.
  int64_t kv_bytes_per_token = 0;
  int64_t state_bytes = 0;
  // Token ids that end a sequence (from config.json; may be empty).
  std::vector<int32_t> eos_token_ids;
};

// Per-sequence state: KV cache for attention layers, conv and recurrent state (fp32) for the
// linear-attention / Mamba layers, and the next position.
class SequenceState {
 public:
  virtual ~SequenceState() = default;
  // Tokens consumed so far (the next token's position).
  virtual int64_t position() const = 0;
};

// A text model's forward pass on the CPU in fp32: the reference every GPU kernel is checked
// against. Thread-compatible: Forward on different states may run concurrently.
class NativeModel {
 public:
  virtual ~NativeModel() = default;
  virtual const ModelShape& shape() const = 0;
  virtual std::unique_ptr<SequenceState> NewState() const = 0;
  // Feeds `tokens` at the state's next positions (a prefill when several, a decode step when
  // one), carrying the state forward. `logits` gets [tokens.size()][vocab] with `all_logits`,
  // else the last token's [vocab]. INVALID_ARGUMENT for out-of-range ids or a full context.
  virtual absl::Status Forward(SequenceState* state, absl::Span<const int32_t> tokens,
                               bool all_logits, std::vector<float>* logits) const = 0;
};

// Loads the model a checkpoint describes, by config.json's model_type (qwen3_5_moe with its
// nested text_config, or nemotron_h). Every tensor is checked against the config; a missing or
// mis-shaped one is an error naming it. Other model types are UNIMPLEMENTED, naming the type.
absl::StatusOr<std::unique_ptr<NativeModel>> LoadNativeModel(const Checkpoint& checkpoint);

}  // namespace tandem::workers::native
