#pragma once

#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace tandem::gateway {

// Every metric the gateway exports, defined here and nowhere else. Units: seconds and tokens.
// model_name and class are "none" for requests refused before a model was chosen.
class GatewayMetrics {
 public:
  // Per-model series, created up front so they exist at 0.
  struct Model {
    prometheus::Histogram* request_duration;
    prometheus::Histogram* time_to_first_token;
    prometheus::Histogram* time_per_output_token;
    prometheus::Gauge* inflight;
    prometheus::Counter* prompt_tokens;
    prometheus::Counter* completion_tokens;
    prometheus::Gauge* ready_workers;
    prometheus::Gauge* workers;
    // Shadow copies sent to this model (answers discarded).
    prometheus::Histogram* shadow_duration;
    prometheus::Counter* shadow_completion_tokens;
  };

  GatewayMetrics(prometheus::Registry& registry, const std::vector<std::string>& models,
                 const std::vector<std::string>& classes, const std::string& version);

  // nullptr for an unknown model.
  Model* ForModel(const std::string& model);
  void CountRequest(const std::string& model, const std::string& request_class, const char* code);
  // A shadow copy finished (or could not start) with `code`.
  void CountShadow(const std::string& model, const std::string& request_class, const char* code);
  void CountDecision(const std::string& model, const std::string& request_class,
                     const std::string& rule, const std::string& policy_version);
  // Policy reloads by result ("ok" or "error"), and the live policy's identity.
  void CountPolicyReload(bool ok);
  void SetLivePolicy(const std::string& version, const std::string& sha256);
  // Decision-log records written and dropped (writer behind).
  prometheus::Counter& decision_log_written() { return decision_log_written_; }
  prometheus::Counter& decision_log_dropped() { return decision_log_dropped_; }

 private:
  using Key = std::tuple<std::string, std::string, std::string>;
  prometheus::Counter& Child(prometheus::Family<prometheus::Counter>& family,
                             std::map<Key, prometheus::Counter*>& cache, const char* third_label,
                             const std::string& model, const std::string& request_class,
                             const std::string& third);

  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Counter>& decisions_;
  prometheus::Family<prometheus::Counter>& shadows_;
  prometheus::Family<prometheus::Gauge>& policy_info_;
  prometheus::Counter& reloads_ok_;
  prometheus::Counter& reloads_error_;
  prometheus::Counter& decision_log_written_;
  prometheus::Counter& decision_log_dropped_;
  prometheus::Gauge* live_policy_ = nullptr;  // guarded by mu_
  std::map<std::string, Model> models_;
  // Family::Add hashes every label and locks; this cache keeps the hot path to one lookup.
  std::mutex mu_;
  std::map<Key, prometheus::Counter*> request_children_;  // guarded by mu_
  std::map<Key, prometheus::Counter*> shadow_children_;   // guarded by mu_
  std::map<std::tuple<std::string, std::string, std::string, std::string>, prometheus::Counter*>
      decision_children_;  // guarded by mu_
};

}  // namespace tandem::gateway
