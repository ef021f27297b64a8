#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/prometheus_text.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace tandem::workers::upstream {

// The engine's own series (vllm:..., sglang:..., llamacpp:..., process_...) as the worker last
// scraped them, served again on the worker's /metrics with one more label naming the engine
// profile, tandem_engine="vllm": one scrape of a worker gives PromQL, dashboards and the gateway's
// signals the engine's raw series next to the normalised tandem_worker_* families. The engine's
// # TYPE lines are not kept (the text parser skips them), so every family is untyped; rate(),
// histogram_quantile() and the rest read untyped series as they read typed ones.
class EngineMetricsMirror : public prometheus::Collectable {
 public:
  // At most `max_series` series are re-exported (0: none), the first ones of the engine's text.
  EngineMetricsMirror(std::string engine, size_t max_series);

  // The samples of the latest good scrape. Names under tandem_ (the worker's own) are left out.
  void Update(std::vector<Sample> samples) ABSL_LOCKS_EXCLUDED(mu_);
  // Stale engine data: nothing is re-exported until the next good scrape, so Prometheus marks
  // the series stale rather than keep old values as current.
  void Clear() ABSL_LOCKS_EXCLUDED(mu_);

  std::vector<prometheus::MetricFamily> Collect() const override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const std::string engine_;
  const size_t max_series_;
  mutable absl::Mutex mu_;
  std::vector<Sample> samples_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::workers::upstream
