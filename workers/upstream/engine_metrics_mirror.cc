#include "workers/upstream/engine_metrics_mirror.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"

namespace tandem::workers::upstream {

namespace {
constexpr char kEngineLabel[] = "tandem_engine";
}  // namespace

EngineMetricsMirror::EngineMetricsMirror(std::string engine, size_t max_series)
    : engine_(std::move(engine)), max_series_(max_series) {}

void EngineMetricsMirror::Update(std::vector<Sample> samples) {
  std::erase_if(samples, [](const Sample& s) { return absl::StartsWith(s.name, "tandem_"); });
  if (samples.size() > max_series_) samples.resize(max_series_);
  absl::MutexLock lock(&mu_);
  samples_ = std::move(samples);
}

void EngineMetricsMirror::Clear() {
  absl::MutexLock lock(&mu_);
  samples_.clear();
}

std::vector<prometheus::MetricFamily> EngineMetricsMirror::Collect() const {
  std::vector<prometheus::MetricFamily> families;
  absl::flat_hash_map<std::string, size_t> index;  // family name -> position in `families`
  absl::MutexLock lock(&mu_);
  for (const Sample& s : samples_) {
    auto [it, inserted] = index.try_emplace(s.name, families.size());
    if (inserted) {
      prometheus::MetricFamily family;
      family.name = s.name;
      family.help = "The engine's own " + s.name + ", as the worker last read it.";
      family.type = prometheus::MetricType::Untyped;
      families.push_back(std::move(family));
    }
    prometheus::ClientMetric metric;
    for (const auto& [name, value] : s.labels) {
      if (name != kEngineLabel) metric.label.push_back({name, value});
    }
    metric.label.push_back({kEngineLabel, engine_});  // the engine's own label of that name loses
    metric.untyped.value = s.value;
    families[it->second].metric.push_back(std::move(metric));
  }
  return families;
}

}  // namespace tandem::workers::upstream
