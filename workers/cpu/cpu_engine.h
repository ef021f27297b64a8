#pragma once

#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "workers/cpu/cpu_model.h"
#include "workers/cpu/qwen35_vision_model.h"
#include "workers/engine.h"
#include "workers/native_checkpoint.h"
#include "workers/sampler.h"
#include "workers/thinking_budget.h"
#include "workers/weights_source.h"

namespace tandem::workers {

struct CpuEngineOptions {
  // Routing name ("qwen", "nemotron") and upstream id reported in WorkerInfo.
  std::string model_name;
  std::string model_id;
  // KV cache plus recurrent state for all sequences together; admission waits when full.
  int64_t memory_budget_bytes = 8ll << 30;
  // Caps; 0 keeps the model's (context: max_position_embeddings).
  int32_t max_output_tokens = 0;
  int32_t max_context_tokens = 0;
  // Set by LoadCpuEngine from the checkpoint (QuantScheme::Name).
  std::string quantization = "none";
  // Prefix cache: most bytes of snapshots (within memory_budget_bytes; 0 disables it) and the
  // tokens between snapshot points.
  int64_t prefix_cache_bytes = 0;
  int32_t prefix_block_tokens = 256;
};

// The vision encoder of a multimodal checkpoint and the processor its images go through.
struct CpuVision {
  std::unique_ptr<cpu::Qwen35VisionModel> encoder;
  vision::PreprocessorConfig processor;
};

// The native engine on the CPU: a CpuModel (fp32, the reference) driven one step at a time by the
// worker's scheduler. Every step runs each listed sequence forward by one token (its whole
// prompt first), then samples. Sequence memory is reserved for prompt + max_tokens at admission,
// so a running sequence never runs out.
class CpuEngine final : public Engine {
 public:
  // `stop_ids` end a sequence (the model's EOS and the chat template's end-of-turn tokens).
  // With `vision` (an encoder), the engine takes images: each prompt's images are encoded at
  // its prefill and their embeddings take the image-pad tokens' places.
  CpuEngine(std::unique_ptr<cpu::CpuModel> model, std::unique_ptr<Tokenizer> tokenizer,
            std::vector<int32_t> stop_ids, CpuEngineOptions options, CpuVision vision = {});

  const EngineInfo& Info() const override { return info_; }
  const Tokenizer& GetTokenizer() const override { return *tokenizer_; }
  absl::Status AddSequence(const SequenceSpec& spec) override;
  void RemoveSequence(uint64_t id) override;
  absl::Status Step(absl::Span<const uint64_t> ids, std::vector<StepOutput>* out) override;
  int64_t SequenceBytes(int64_t prompt_tokens, int32_t max_tokens) const override;
  int64_t MemoryBudgetBytes() const override { return options_.memory_budget_bytes; }
  int64_t MemoryReservedBytes() const override { return reserved_.load(); }
  const vision::PreprocessorConfig* ImageProcessor() const override {
    return vision_.encoder != nullptr ? &vision_.processor : nullptr;
  }
  int64_t CachedPromptTokens(uint64_t id) const override;
  PrefixCacheStats PrefixStats() const override { return cache_.stats(); }

  const cpu::CpuModel& model() const { return *model_; }

 private:
  struct Sequence {
    std::unique_ptr<cpu::SequenceState> state;
    std::vector<int32_t> prompt;
    SamplingConfig sampling;
    std::mt19937_64 rng;
    int32_t last_token = -1;
    int64_t reserved = 0;
    ThinkingBudget thinking;
    std::vector<std::shared_ptr<const vision::PreparedImage>> images;
    // Prefix cache: every token fed so far (the prompt first), the prompt tokens restored from
    // a snapshot, the branch point the cache saw, and the length of the snapshot last taken
    // while decoding (superseded by the next one: a next turn resends the whole answer).
    bool cacheable = false;
    bool has_images = false;
    // The prompt's tokens before its first image (all of them without images): what a snapshot
    // may cover.
    int64_t text_prefix = 0;
    std::string partition;
    std::vector<int32_t> tokens;
    int64_t cached = 0;
    int64_t branch = 0;
    int64_t decode_snapshot = 0;
  };

  // The prompt of a sequence with images: encoded, then fed with 3-D positions.
  absl::Status PrefillWithImages(Sequence& seq);
  // The prompt's text prefix (text_prefix), from its cached part on, up to the last point worth
  // a snapshot (the branch point, the last block boundary), taking them; logits_ then holds the
  // last piece's.
  absl::Status PrefillToSnapshots(Sequence& seq);
  // A text prompt: PrefillToSnapshots, then the rest.
  absl::Status PrefillText(Sequence& seq);
  // Feeds one generated token; keeps a snapshot at each block boundary.
  absl::Status Decode(Sequence& seq);
  void OfferSnapshot(const Sequence& seq, const cpu::SequenceState& state);

  const std::unique_ptr<cpu::CpuModel> model_;
  const std::unique_ptr<Tokenizer> tokenizer_;
  const std::vector<int32_t> stop_ids_;
  const CpuEngineOptions options_;
  // "<think>" and "</think>" of the vocabulary, for every sequence's ThinkingBudget.
  const ThinkingMarkers thinking_markers_;
  const CpuVision vision_;
  EngineInfo info_;
  std::unordered_map<uint64_t, Sequence> sequences_;
  std::atomic<int64_t> reserved_{0};
  PrefixCache cache_;
  Sampler sampler_;
  std::vector<float> logits_;
};

// The vision encoder of a checkpoint whose config has a vision_config and whose tensors include
// model.visual.* (else none: a text checkpoint serves text). The tokenizer must agree on the
// vision token ids (CheckVisionTokens): an error for a checkpoint; for random weights a warning
// and no encoder (text only).
absl::StatusOr<CpuVision> LoadCpuVision(const model::Checkpoint& checkpoint,
                                        const model::ModelConfig& config,
                                        const vision::PreprocessorConfig& processor,
                                        const Tokenizer& tokenizer);

// A native engine from a checkpoint directory (config.json, safetensors (single or sharded) and
// tokenizer.json) or from generated weights (--random_weights). The model's routing name must
// fit its architecture (qwen: qwen3_5_moe, nemotron: nemotron_h). `random_weights` is set when
// the weights are random (generated, or config.json says tandem-make-checkpoint wrote them), so
// the worker can say loudly that its answers are meaningless.
absl::StatusOr<std::unique_ptr<CpuEngine>> LoadCpuEngine(const WeightsSource& source,
                                                         CpuEngineOptions options,
                                                         bool* random_weights);

}  // namespace tandem::workers
