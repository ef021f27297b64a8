#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>

#include "common/clock.h"
#include "workers/engine.h"
#include "workers/simulator/synthetic_profile.h"
#include "workers/simulator/synthetic_tokenizer.h"

namespace tandem::workers {

struct SyntheticEngineOptions {
  // Multiplies every simulated duration; 0 runs with no delay (tests, gateway overhead runs).
  double time_scale = 1.0;
  // Fixed answer length in tokens; 0 derives a length in [16, 511] from the prompt.
  int32_t output_tokens = 0;
};

// LOAD SIMULATOR, not a model: streams deterministic filler tokens with the timing of the real
// model on an H200 (see SyntheticProfile). Output depends only on the prompt, and on the seed
// when temperature > 0; a continuation of a partial answer (continue_final) goes on exactly as
// the uncut answer did (see SyntheticTokenizer). Used to test and benchmark everything around
// the engine.
class SyntheticEngine final : public Engine {
 public:
  SyntheticEngine(SyntheticProfile profile, SyntheticEngineOptions options, Clock* clock);

  const EngineInfo& Info() const override { return profile_.info; }
  const Tokenizer& GetTokenizer() const override { return tokenizer_; }
  absl::Status AddSequence(const SequenceSpec& spec) override;
  void RemoveSequence(uint64_t id) override;
  absl::Status Step(absl::Span<const uint64_t> ids, std::vector<StepOutput>* out) override;

  // Simulated duration of one step, before time scaling. Public for tests.
  double StepSeconds(int64_t prefill_tokens, int64_t batch, int64_t context_tokens) const;

 private:
  struct Sequence {
    uint64_t stream_hash = 0;
    int64_t prompt_tokens = 0;
    // Words of the answer before this sequence's first (a continuation's partial answer).
    int32_t resume_at = 0;
    int32_t generated = 0;
    // Of the whole answer, resume_at included.
    int32_t length = 0;
    bool prefilled = false;
  };

  const SyntheticProfile profile_;
  const SyntheticEngineOptions options_;
  Clock* const clock_;
  const SyntheticTokenizer tokenizer_;
  std::unordered_map<uint64_t, Sequence> sequences_;
};

}  // namespace tandem::workers
