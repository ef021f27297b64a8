#include "workers/simulator/synthetic_engine.h"

#include "absl/strings/str_cat.h"
#include "common/split_mix.h"

namespace tandem::workers {

SyntheticEngine::SyntheticEngine(SyntheticProfile profile, SyntheticEngineOptions options,
                                 Clock* clock)
    : profile_(std::move(profile)),
      options_(options),
      clock_(clock),
      tokenizer_(profile_.tokens_per_image) {}

double SyntheticEngine::StepSeconds(int64_t prefill_tokens, int64_t batch,
                                    int64_t context_tokens) const {
  double seconds = static_cast<double>(prefill_tokens) / profile_.prefill_tokens_per_second;
  if (batch > 0) {
    seconds += profile_.decode_step_batch1_seconds +
               static_cast<double>(batch - 1) * profile_.decode_step_per_extra_sequence_seconds;
    seconds += static_cast<double>(context_tokens) * profile_.kv_bytes_per_token /
               profile_.effective_memory_bandwidth_bytes_per_second;
  }
  return seconds;
}

absl::Status SyntheticEngine::AddSequence(const SequenceSpec& spec) {
  if (sequences_.contains(spec.id)) {
    return absl::AlreadyExistsError(absl::StrCat("sequence ", spec.id, " already exists"));
  }
  // A continuation of the simulator's own partial answer hashes the prompt a fresh request
  // gets and resumes after the partial answer's words, so it goes on exactly as the fresh
  // answer would.
  const SyntheticTokenizer::Continuation c = SyntheticTokenizer::ParseContinuation(spec.prompt);
  uint64_t h = 0x5EED;
  for (size_t i = 0; i < c.stream_prefix; ++i)
    h = SplitMix64(h ^ static_cast<uint64_t>(spec.prompt[i]));
  Sequence seq;
  seq.prompt_tokens = static_cast<int64_t>(spec.prompt.size());
  seq.resume_at = c.resume_at;
  seq.length =
      options_.output_tokens > 0 ? options_.output_tokens : 16 + static_cast<int32_t>(h % 496);
  // Greedy decoding ignores the seed, as a real model's would.
  seq.stream_hash = spec.sampling.temperature == 0.0f ? h : SplitMix64(h ^ spec.sampling.seed);
  sequences_.emplace(spec.id, seq);
  return absl::OkStatus();
}

void SyntheticEngine::RemoveSequence(uint64_t id) { sequences_.erase(id); }

absl::Status SyntheticEngine::Step(absl::Span<const uint64_t> ids, std::vector<StepOutput>* out) {
  const Clock::TimePoint start = clock_->Now();
  int64_t prefill = 0;
  int64_t context = 0;
  for (uint64_t id : ids) {
    auto it = sequences_.find(id);
    if (it == sequences_.end()) return absl::InternalError(absl::StrCat("unknown sequence ", id));
    Sequence& seq = it->second;
    if (!seq.prefilled) prefill += seq.prompt_tokens;
    context += seq.prompt_tokens + seq.generated;
  }
  const double seconds = StepSeconds(prefill, static_cast<int64_t>(ids.size()), context);
  if (options_.time_scale > 0) {
    clock_->SleepUntil(start + std::chrono::duration_cast<Clock::TimePoint::duration>(
                                   std::chrono::duration<double>(seconds * options_.time_scale)));
  }
  for (uint64_t id : ids) {
    Sequence& seq = sequences_[id];
    seq.prefilled = true;
    StepOutput o;
    o.id = id;
    const int32_t index = seq.resume_at + seq.generated;  // in the whole answer
    if (index >= seq.length) {
      o.end_of_sequence = true;
    } else {
      o.token = static_cast<int32_t>(SplitMix64(seq.stream_hash + static_cast<uint64_t>(index)) %
                                     static_cast<uint64_t>(SyntheticTokenizer::VocabularySize()));
      ++seq.generated;
    }
    out->push_back(o);
  }
  return absl::OkStatus();
}

}  // namespace tandem::workers
