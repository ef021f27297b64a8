#include "workers/upstream/engine_signals.h"

#include <algorithm>
#include <string>

#include "absl/strings/match.h"

namespace tandem::workers::upstream {
namespace {

enum class Combine { kSum, kMax };

std::optional<double> Read(const std::vector<Sample>& samples,
                           const std::vector<std::string>& names, Combine combine) {
  for (const std::string& name : names) {
    const std::string want = CanonicalMetricName(name);
    std::optional<double> value;
    for (const Sample& s : samples) {
      if (CanonicalMetricName(s.name) != want) continue;
      if (!value) {
        value = s.value;
      } else {
        value = combine == Combine::kSum ? *value + s.value : std::max(*value, s.value);
      }
    }
    if (value) return value;
  }
  return std::nullopt;
}

}  // namespace

std::string CanonicalMetricName(absl::string_view name) {
  std::string out(name);
  std::replace(out.begin(), out.end(), ':', '_');
  if (absl::EndsWith(out, "_total")) out.resize(out.size() - 6);
  return out;
}

EngineSignals ReadEngineSignals(const std::vector<Sample>& samples, const EngineProfile& profile) {
  EngineSignals s;
  s.waiting = Read(samples, profile.waiting_metrics, Combine::kSum);
  s.running = Read(samples, profile.running_metrics, Combine::kSum);
  s.kv_cache_usage = Read(samples, profile.kv_cache_usage_metrics, Combine::kMax);
  s.prompt_tokens_total = Read(samples, profile.prompt_tokens_metrics, Combine::kSum);
  s.generation_tokens_total = Read(samples, profile.generation_tokens_metrics, Combine::kSum);
  return s;
}

}  // namespace tandem::workers::upstream
