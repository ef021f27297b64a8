#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tools/bench/run_result.h"

namespace tandem::bench {

// One gateway to measure: its label in the tables ("prefix", "round_robin", "prefix, cache off")
// and HOST:PORT.
struct PrefixTarget {
  std::string label;
  std::string address;
};

struct PrefixOptions {
  int conversations = 8;       // chat: conversations, each turn after turn
  int turns = 6;               // chat: turns per conversation
  int system_words = 2000;     // chat: the shared system prompt (about a token a word)
  int private_words = 0;       // chat: a document of each conversation's own in its first turn
  int agent_loops = 4;         // agent: loops, each step after step
  int agent_steps = 8;         // agent: steps per loop, each resending the whole history
  int unshared_requests = 32;  // unshared: independent prompts of about 500 words
  int concurrency = 4;         // conversations (or loops, or prompts) in flight at once
  int max_tokens = 16;
  std::string model = "qwen";  // hints.model of every request
};

// What one workload did on one target.
struct PrefixResult {
  std::string target, workload;
  Percentiles ttft_ms;  // the gateway's time to first token (Timings)
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // of prompt_tokens, resumed from the workers' prefix caches
  int64_t failed = 0;
};

// --preset=prefix: the same three workloads on each target, one after another, with texts of
// their own per target (so that no target resumes from what an earlier one left in the
// workers' caches): a chat (conversations that share a long system prompt and grow turn by
// turn), an agent loop (every step resends the whole history), and unshared prompts. Prints a
// table of TTFT p50/p99 and prompt tokens computed; writes JSON when asked.
absl::Status RunPrefixPreset(const std::vector<PrefixTarget>& targets, const PrefixOptions& options,
                             const std::string& json_path);

// "LABEL=HOST:PORT;..." (';' between targets: labels may hold commas).
absl::StatusOr<std::vector<PrefixTarget>> ParsePrefixTargets(const std::string& flag);

}  // namespace tandem::bench
