#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "workers/prefix_cache.h"
#include "workers/tokenizer/tokenizer.h"
#include "workers/vision/image_preprocessor.h"

namespace tandem::workers {

// What an engine serves; reported in WorkerInfo and used by the gateway for validation.
struct EngineInfo {
  // Implementation name: "synthetic" is the load simulator (a test and benchmark tool).
  std::string engine;
  // Routing name ("qwen", "nemotron") and upstream id ("Qwen/Qwen3.5-35B-A3B").
  std::string model_name;
  std::string model_id;
  bool vision = false;
  bool reasoning = false;
  int32_t max_context_tokens = 0;
  int32_t max_output_tokens = 0;
  // The weights' format (QuantScheme::Name): "none" (BF16/F32), "fp8-block"; "unknown" for an
  // engine server's.
  std::string quantization = "none";
};

struct SamplingConfig {
  // 0 is greedy.
  float temperature = 1.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;
  uint64_t seed = 0;
};

struct SequenceSpec {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  SamplingConfig sampling;
  // Most tokens the sequence will generate (its memory is reserved for prompt + max_tokens).
  int32_t max_tokens = 0;
  // Most tokens inside a thinking block (<think> ... </think>) before the engine forces its end;
  // 0 for no separate budget.
  int32_t thinking_budget = 0;
  // The prompt's images in prompt order (only for an engine whose Info().vision is true); each
  // takes one contiguous run of its num_tokens image-pad tokens in `prompt`.
  std::vector<std::shared_ptr<const vision::PreparedImage>> images;
  // Prompts match cached prefixes only within one partition (the gateway sends the tenant, or
  // one shared value when the operator shares the cache).
  std::string cache_partition;
};

struct StepOutput {
  uint64_t id = 0;
  int32_t token = 0;
  // The model ended the sequence (end-of-sequence token); `token` is not text.
  bool end_of_sequence = false;
};

// A model executor driven by the worker's engine thread, one step at a time. Not thread-safe:
// only the engine thread calls it. Implementations own per-sequence state (KV cache, recurrent
// state) between AddSequence and RemoveSequence.
class Engine {
 public:
  virtual ~Engine() = default;

  virtual const EngineInfo& Info() const = 0;
  virtual const Tokenizer& GetTokenizer() const = 0;

  // Reserves state for a sequence. RESOURCE_EXHAUSTED when the engine has no room now.
  virtual absl::Status AddSequence(const SequenceSpec& spec) = 0;
  virtual void RemoveSequence(uint64_t id) = 0;

  // Advances every listed sequence by one token; sequences not yet run are prefilled first.
  // Appends one StepOutput per id, in order.
  virtual absl::Status Step(absl::Span<const uint64_t> ids, std::vector<StepOutput>* out) = 0;

  // Sequence memory (KV cache and recurrent state), for admission against a budget. Engines
  // without one report a zero budget and never refuse. Thread-safe.
  // Bytes a sequence of this size reserves.
  virtual int64_t SequenceBytes(int64_t prompt_tokens, int32_t max_tokens) const {
    (void)prompt_tokens;
    (void)max_tokens;
    return 0;
  }
  // The image processor of an engine that takes images (Info().vision): how the worker turns
  // a request's images into SequenceSpec::images and prompt tokens. Null otherwise.
  virtual const vision::PreprocessorConfig* ImageProcessor() const { return nullptr; }
  // 0 when the engine has no budget.
  virtual int64_t MemoryBudgetBytes() const { return 0; }
  // Bytes reserved by sequences; a prefix cache's snapshots are not counted here (they are
  // evicted to make room for a sequence).
  virtual int64_t MemoryReservedBytes() const { return 0; }

  // Prompt tokens of sequence `id` that came from the prefix cache (0 without one).
  virtual int64_t CachedPromptTokens(uint64_t id) const {
    (void)id;
    return 0;
  }
  // The prefix cache's counters and size (all zero without one). Engine thread only.
  virtual PrefixCacheStats PrefixStats() const { return {}; }
};

}  // namespace tandem::workers
