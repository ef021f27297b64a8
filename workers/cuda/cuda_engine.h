#pragma once

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "workers/cuda/cuda_model.h"
#include "workers/cuda/cuda_qwen35_vision.h"
#include "workers/engine.h"
#include "workers/model/mrope_positions.h"
#include "workers/thinking_budget.h"
#include "workers/weights_source.h"

namespace tandem::workers::cuda {

struct CudaEngineOptions {
  std::string model_name;
  std::string model_id;
  int device = 0;
  // Share of the device memory left free after the weights that goes to sequence state
  // (recurrent slots + KV blocks).
  double memory_fraction = 0.9;
  int32_t max_sequences = 256;
  int32_t max_output_tokens = 0;
  int32_t max_context_tokens = 0;
  // Capture each decode batch-size bucket as a CUDA graph (off: launch the kernels directly).
  bool cuda_graphs = true;
  // With a vision encoder: the most patches one image may have. 0: the largest image the
  // preprocessor makes (max_pixels / patch_size^2; 65,536 for the released settings).
  int64_t max_image_patches = 0;
};

// The image path of a Qwen3.5 checkpoint that holds its vision encoder (model.visual.*).
struct CudaEngineVision {
  std::unique_ptr<CudaVisionEncoder> encoder;  // null: a text-only engine
  vision::PreprocessorConfig preprocessor;
};

// The native engine on a GPU. The worker's process owns the device and this engine owns its
// one stream. Weights are uploaded once; sequence memory is a fixed pool of recurrent-state
// slots and KV blocks carved from a fraction of free device memory at start-up; admission
// reserves a slot and the blocks for prompt + max_tokens. A step prefills new sequences one by
// one, then decodes every running sequence in one batch padded to a bucket size (1, 2, 4, ...,
// 256) whose kernels are captured once as a CUDA graph and replayed; the only host
// synchronization per step is reading back the sampled tokens.
//
// Images (with a vision encoder; Info().vision): a prompt's images are encoded at its prefill,
// one at a time, each followed by the prefill of the prompt up to its last image token (its
// tokens' embeddings replaced by the encoder's rows, every token rotated by its 3-D mRoPE
// position), then the rest of the prompt. Decode rotates by position + the sequence's
// rope_delta. The encoder's scratch and one image's embeddings are reserved once at start-up
// for max_image_patches, before the sequence pools are carved from the free memory, so they
// never compete with admitted sequences; SequenceBytes counts a prompt's image tokens like
// any other token.
class CudaEngine final : public Engine {
 public:
  static absl::StatusOr<std::unique_ptr<CudaEngine>> Create(std::unique_ptr<CudaModel> model,
                                                            std::unique_ptr<Tokenizer> tokenizer,
                                                            std::vector<int32_t> stop_ids,
                                                            CudaEngineOptions options,
                                                            CudaEngineVision vision = {});
  ~CudaEngine() override;

  const EngineInfo& Info() const override { return info_; }
  const Tokenizer& GetTokenizer() const override { return *tokenizer_; }
  absl::Status AddSequence(const SequenceSpec& spec) override;
  void RemoveSequence(uint64_t id) override;
  absl::Status Step(absl::Span<const uint64_t> ids, std::vector<StepOutput>* out) override;
  int64_t SequenceBytes(int64_t prompt_tokens, int32_t max_tokens) const override;
  int64_t MemoryBudgetBytes() const override { return budget_bytes_; }
  int64_t MemoryReservedBytes() const override { return reserved_bytes_.load(); }
  const vision::PreprocessorConfig* ImageProcessor() const override {
    return vision_.encoder != nullptr ? &vision_.preprocessor : nullptr;
  }

 private:
  struct Sequence {
    SequenceSlot slot;
    std::vector<int32_t> prompt;
    SamplingConfig sampling;
    int64_t position = 0;  // tokens fed so far
    int32_t last_token = -1;
    int64_t steps = 0;  // tokens sampled so far (the RNG counter)
    int64_t reserved = 0;
    // Replaces a sampled token with the end of thinking once the budget is spent; the host
    // copy of the token is what the next step feeds, so the forced one is what the model sees.
    ThinkingBudget thinking;
    // An image prompt's images and 3-D positions, until its prefill.
    std::vector<std::shared_ptr<const vision::PreparedImage>> images;
    model::MropePositions mrope;
    // Added to a decode token's position for its rotary angles (0 for text).
    int64_t rope_delta = 0;
  };
  // Device arrays of one bucket, fixed for the graph that reads them.
  struct Bucket {
    int64_t size = 0;
    int32_t* tokens = nullptr;
    int32_t* positions = nullptr;
    int32_t* rope_positions = nullptr;
    int32_t* slots = nullptr;
    int32_t* block_tables = nullptr;
    float* logits = nullptr;
    float* temperature = nullptr;
    int32_t* top_k = nullptr;
    float* top_p = nullptr;
    uint64_t* seeds = nullptr;
    int64_t* steps = nullptr;
    int32_t* sampled = nullptr;
    cudaGraphExec_t graph = nullptr;
  };

  CudaEngine(std::unique_ptr<CudaModel> model, std::unique_ptr<Tokenizer> tokenizer,
             std::vector<int32_t> stop_ids, CudaEngineOptions options, CudaEngineVision vision);
  absl::Status Init();
  // The encoder's scratch and the embeddings buffer, before the pools (see the class comment).
  absl::Status InitVision();
  // The images of a new sequence and their positions in its prompt.
  absl::Status AdmitImages(const SequenceSpec& spec, Sequence* seq) const;
  // The prefill of an image prompt (see the class comment); the last token's logits.
  absl::Status PrefillImages(Sequence& seq, float* logits);
  int64_t BlocksFor(int64_t tokens) const;
  absl::StatusOr<Bucket*> BucketFor(int64_t batch);
  // One decode step of `seqs` in the smallest bucket that holds them; their sampled tokens.
  absl::Status RunDecode(const std::vector<Sequence*>& seqs, std::vector<int32_t>* tokens);
  // RunDecode's steps: the inputs of every row of `b` (padding rows past seqs' end) copied to
  // its device arrays, then the decode and sampling kernels, as the bucket's graph when
  // options_.cuda_graphs (captured at its first use). Both only enqueue on stream_.
  absl::Status StageDecodeInputs(const std::vector<Sequence*>& seqs, Bucket* b);
  absl::Status LaunchDecode(Bucket* b);
  absl::Status SampleOne(Sequence& seq, const float* logits, int32_t* token);

  const std::unique_ptr<CudaModel> model_;
  const std::unique_ptr<Tokenizer> tokenizer_;
  const std::vector<int32_t> stop_ids_;
  const CudaEngineOptions options_;
  const ThinkingMarkers thinking_markers_;
  const CudaEngineVision vision_;
  int64_t max_image_patches_ = 0;
  // One image's embeddings: [max_image_patches_ / merge^2][hidden] fp32.
  float* image_embeddings_ = nullptr;
  EngineInfo info_;
  cudaStream_t stream_ = nullptr;
  void* state_pool_ = nullptr;
  void* kv_pool_ = nullptr;
  int64_t slots_ = 0;
  int64_t blocks_ = 0;
  int64_t max_blocks_per_sequence_ = 0;
  int64_t budget_bytes_ = 0;
  std::atomic<int64_t> reserved_bytes_{0};
  std::vector<int32_t> free_slots_;
  std::vector<int32_t> free_blocks_;
  // Per-sequence device block tables (max_blocks_per_sequence_ ints each), indexed by slot.
  int32_t* block_tables_ = nullptr;
  std::unordered_map<uint64_t, Sequence> sequences_;
  std::map<int64_t, Bucket> buckets_;
  // Pinned host staging for one bucket's inputs and the sampled tokens.
  int32_t* host_ints_ = nullptr;
  int32_t* host_sampled_ = nullptr;
};

// A CUDA engine from a checkpoint directory or from generated weights (--random_weights:
// every tensor at the config's full size, filled on the device), on options.device (the
// process's device). `random_weights` as LoadCpuEngine's.
absl::StatusOr<std::unique_ptr<CudaEngine>> LoadCudaEngine(const WeightsSource& source,
                                                           CudaEngineOptions options,
                                                           bool* random_weights);

}  // namespace tandem::workers::cuda
