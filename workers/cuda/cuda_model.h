#pragma once

// The CUDA engine's model interface: weights resident on the device, per-sequence state in
// slots and KV blocks handed out by the engine's memory pool (cuda_memory.h). Host code; the
// kernels it sequences are declared in kernels.h.

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "workers/model/model_config.h"
#include "workers/model/model_shape.h"
#include "workers/model/safetensors.h"

namespace tandem::workers::cuda {

// One sequence's place in device memory.
struct SequenceSlot {
  // Index of its recurrent-state slot (conv + SSM/GDN state for every recurrent layer).
  int32_t state_slot = -1;
  // Device pointer to its block table (int32 block ids, max_blocks entries) and the host copy.
  int32_t* block_table = nullptr;
  std::vector<int32_t> blocks;
};

// What one decode step reads: all device pointers, fixed per batch-size bucket so a captured
// CUDA graph can replay it (the engine rewrites the arrays' contents, never the pointers).
struct DecodeBatch {
  int64_t batch = 0;
  const int32_t* tokens = nullptr;        // [batch]
  const int32_t* positions = nullptr;     // [batch] position of the token fed
  const int32_t* state_slots = nullptr;   // [batch]
  const int32_t* block_tables = nullptr;  // [batch][max_blocks]
  int64_t max_blocks = 0;
  float* logits = nullptr;  // [batch][vocab] out
  // [batch] rotary position of the token fed: its position plus the sequence's rope_delta
  // (Qwen3.5 after an image prompt; the same on every mRoPE axis). Null: `positions`. Last, so
  // that positional initializers of the fields above stay valid.
  const int32_t* rope_positions = nullptr;
};

// A prefill's inputs: `count` tokens (host) at sequence indices start.., and what an image
// prompt adds (Qwen3.5 only; other models refuse them).
struct PrefillInputs {
  const int32_t* tokens = nullptr;
  int64_t count = 0;
  int64_t start = 0;
  // Host [3][count]: the t, h and w rotary positions of the tokens (model/mrope_positions.h's,
  // sliced to these tokens). Null: start + i on every axis (text).
  const int32_t* mrope_positions = nullptr;
  // Embedding overrides: host [count], -1 keeps a token's embedding, r >= 0 replaces it by row
  // r of `embeddings` (device fp32 [embedding_count][hidden]: the image encoder's output).
  const int32_t* embedding_rows = nullptr;
  const float* embeddings = nullptr;
  int64_t embedding_count = 0;
};

class CudaModel {
 public:
  virtual ~CudaModel() = default;
  virtual const model::ModelShape& shape() const = 0;
  // Bytes of one recurrent-state slot (all recurrent layers of one sequence; 0 if none) and of
  // one KV block (kKvBlockTokens tokens of K and V for every attention layer).
  virtual int64_t state_slot_bytes() const = 0;
  virtual int64_t kv_block_bytes() const = 0;
  // Device memory the weights occupy.
  virtual int64_t weight_bytes() const = 0;
  // Binds the pools the engine allocated: `slots` recurrent-state slots and `blocks` KV blocks.
  virtual absl::Status BindMemory(void* state_slots, int64_t slots, void* kv_blocks,
                                  int64_t blocks) = 0;
  // Zeroes a state slot for a new sequence.
  virtual absl::Status ResetSlot(int32_t slot, cudaStream_t stream) = 0;
  // Prefill of one sequence: in.tokens at positions in.start..; its blocks must cover them.
  // Writes the last token's logits to `logits` (device, vocab floats). Synchronizes before it
  // returns (the host arrays of `in` may go once it has).
  virtual absl::Status Prefill(const PrefillInputs& in, const SequenceSlot& seq, float* logits,
                               cudaStream_t stream) = 0;
  // A text prefill: `tokens` (host) at positions start...
  absl::Status Prefill(const int32_t* tokens, int64_t count, int64_t start, const SequenceSlot& seq,
                       float* logits, cudaStream_t stream) {
    PrefillInputs in;
    in.tokens = tokens;
    in.count = count;
    in.start = start;
    return Prefill(in, seq, logits, stream);
  }
  // One decode token for every sequence of the batch. Graph-capturable: only launches.
  virtual absl::Status Decode(const DecodeBatch& batch, cudaStream_t stream) = 0;
};

// Uploads a checkpoint's weights (as BF16) to the current device and builds the model `config`
// (the checkpoint's parsed config.json) describes. Errors name the tensor or field.
absl::StatusOr<std::unique_ptr<CudaModel>> LoadCudaModel(const model::Checkpoint& checkpoint,
                                                         const model::ModelConfig& config);
// The same, parsing the checkpoint's own config.json (ParseModelConfig's errors).
absl::StatusOr<std::unique_ptr<CudaModel>> LoadCudaModel(const model::Checkpoint& checkpoint);

}  // namespace tandem::workers::cuda
