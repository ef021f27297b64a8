#pragma once

#include <optional>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/prometheus_text.h"
#include "workers/upstream/engine_profile.h"

namespace tandem::workers::upstream {

// What the router reads from an engine, taken from its /metrics by the profile's names. A
// name matches across the spellings engines and their re-exporters use: ':' or '_'
// ("vllm:num_requests_waiting", "sglang_num_queue_reqs"), with or without the "_total" suffix
// of counters. Series of one name are summed (one per data-parallel rank or LoRA); KV use takes
// the fullest. Unset when the engine exports none of the names.
struct EngineSignals {
  std::optional<double> waiting;
  std::optional<double> running;
  std::optional<double> kv_cache_usage;  // 0..1
  std::optional<double> prompt_tokens_total;
  std::optional<double> generation_tokens_total;
};

EngineSignals ReadEngineSignals(const std::vector<Sample>& samples, const EngineProfile& profile);

// The spelling-independent form of a metric name used for matching.
std::string CanonicalMetricName(absl::string_view name);

}  // namespace tandem::workers::upstream
