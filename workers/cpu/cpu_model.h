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
#include "workers/model/safetensors.h"

namespace tandem::workers::cpu {

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
