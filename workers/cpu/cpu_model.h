#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "workers/model/model_config.h"
#include "workers/model/model_shape.h"
#include "workers/model/mrope_positions.h"
#include "workers/model/safetensors.h"

namespace tandem::workers::cpu {

// Per-sequence state: KV cache for attention layers, conv and recurrent state (fp32) for the
// linear-attention / Mamba layers, and the next position.
class SequenceState {
 public:
  virtual ~SequenceState() = default;
  // Tokens consumed so far (the next token's position).
  virtual int64_t position() const = 0;
  // A deep copy: continuing it gives what continuing this state gives (the prefix cache's
  // snapshots).
  virtual std::unique_ptr<SequenceState> Clone() const = 0;
  // Bytes it holds now (KV for the tokens consumed plus the fixed recurrent and conv state).
  virtual int64_t bytes() const = 0;
};

// What a prompt with images adds to a forward pass (Qwen3.5): rows that replace the token
// embeddings at the image-token positions, and 3-D rotary positions for every token.
struct MultimodalInput {
  // [image tokens][hidden]: replaces the embedding of each `image_token_id` token, in order.
  absl::Span<const float> image_embeds;
  int32_t image_token_id = -1;
  // The (t, h, w) positions of exactly the tokens fed, and the prompt's rope_delta: later
  // tokens on the state are at (sequence index + rope_delta) on every axis.
  const model::MropePositions* positions = nullptr;
};

// A text model's forward pass on the CPU in fp32: the reference every GPU kernel is checked
// against. Thread-compatible: Forward on different states may run concurrently.
class CpuModel {
 public:
  virtual ~CpuModel() = default;
  virtual const model::ModelShape& shape() const = 0;
  virtual std::unique_ptr<SequenceState> NewState() const = 0;
  // Feeds `tokens` at the state's next positions (a prefill when several, a decode step when
  // one), carrying the state forward. `logits` gets [tokens.size()][vocab] with `all_logits`,
  // else the last token's [vocab]. INVALID_ARGUMENT for out-of-range ids or a full context.
  virtual absl::Status Forward(SequenceState* state, absl::Span<const int32_t> tokens,
                               bool all_logits, std::vector<float>* logits) const = 0;
  // Forward with image embeddings and 3-D positions (a prompt with images). INVALID_ARGUMENT
  // when the image tokens do not match the embedding rows or the positions the tokens;
  // UNIMPLEMENTED for a model that takes no images.
  virtual absl::Status ForwardMultimodal(SequenceState* state, absl::Span<const int32_t> tokens,
                                         const MultimodalInput& input, bool all_logits,
                                         std::vector<float>* logits) const {
    (void)state;
    (void)tokens;
    (void)input;
    (void)all_logits;
    (void)logits;
    return absl::UnimplementedError("this model takes no images");
  }
};

// Loads the model `config` (the checkpoint's parsed config.json) describes. Every tensor is
// checked against the config; a missing or mis-shaped one is an error naming it.
absl::StatusOr<std::unique_ptr<CpuModel>> LoadCpuModel(const model::Checkpoint& checkpoint,
                                                       const model::ModelConfig& config);
// The same, parsing the checkpoint's own config.json (ParseModelConfig's errors).
absl::StatusOr<std::unique_ptr<CpuModel>> LoadCpuModel(const model::Checkpoint& checkpoint);

// The checks every CpuModel::Forward makes before touching its state: a logits vector, at
// least one token, every id in the vocabulary, and room for them after the `position` tokens
// already in context. INVALID_ARGUMENT naming the architecture and the offending value.
absl::Status CheckForwardInput(const model::ModelShape& shape, int64_t position,
                               absl::Span<const int32_t> tokens, const std::vector<float>* logits);

}  // namespace tandem::workers::cpu
