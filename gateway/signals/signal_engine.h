#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/http_client.h"
#include "common/prometheus_text.h"
#include "gateway/metrics/gateway_metrics.h"
#include "gateway/pool/worker_pools.h"
#include "gateway/signals/trigger.h"
#include "router/policy.h"
#include "router/signal_snapshot.h"
#include "tandem/v1/admin.pb.h"

namespace tandem::gateway {

// This gateway's own dispatch state of one model, read by gateway signals.
struct ModelLoad {
  int queued = 0;          // requests waiting for one of the model's dispatch slots
  int inflight = 0;        // requests dispatched to its workers, not yet finished
  int usable_workers = 0;  // endpoints a request may be sent to now
};

struct SignalEngineOptions {
  // How often every worker's /metrics is scraped (also the refresh interval of scrape signals).
  absl::Duration scrape_interval = absl::Milliseconds(250);
  absl::Duration scrape_timeout = absl::Milliseconds(500);
  // For workers whose /metrics is HTTPS (WorkerInfo.metrics_tls): the roots that sign their
  // certificates, the client certificate shown to them, and the name their certificates carry
  // when not the host dialled (the gateway's --worker_tls_* flags).
  TlsFiles scrape_tls;
  std::string scrape_tls_server_name;
  // Base URL of the Prometheus server PromQL signals query, e.g. http://prometheus:9090.
  std::string prometheus_url;
  absl::Duration promql_timeout = absl::Seconds(1);
  // The source of gateway signals; nullopt for a model this gateway does not serve. Called with
  // the engine's lock held, every scrape round: it must be cheap and must not call the engine.
  std::function<std::optional<ModelLoad>(const std::string& model)> local_load;
};

// Turns live metrics into the policy's signals and triggers. Three sources: the gateway's own
// scrape of every worker's /metrics (gauges, counter rates and histogram quantiles from deltas
// between scrapes), PromQL instant queries against a Prometheus server, and the gateway's own
// dispatch state (options.local_load); sum signals add others. Each round publishes
// an immutable SignalSnapshot that intake reads without locking. HTTP happens only on the
// engine's own two threads (scrapes, queries); nothing here runs on a gRPC reactor.
class SignalEngine {
 public:
  // One client per engine thread; null: libcurl, with options.scrape_tls for the scrapes.
  using HttpFactory = std::function<std::unique_ptr<HttpClient>()>;
  SignalEngine(const WorkerPools* pools, GatewayMetrics* metrics, SignalEngineOptions options,
               Clock* clock = Clock::Real(), HttpFactory http_factory = nullptr);
  ~SignalEngine();

  // What a policy needs that this gateway lacks (a PromQL signal without --prometheus_url, a
  // scrape of a model with no workers): FAILED_PRECONDITION listing each.
  absl::Status Validate(const router::Policy& policy) const;
  // The live policy's signals and triggers; called at start and on every reload. State of
  // signals and triggers that keep their name and definition carries over.
  void SetPolicy(std::shared_ptr<const router::Policy> policy) ABSL_LOCKS_EXCLUDED(mu_);
  std::shared_ptr<const router::SignalSnapshot> Current() const { return snapshot_.load(); }
  tandem::v1::GetSignalsResponse Describe() const ABSL_LOCKS_EXCLUDED(mu_);

  // One round of each source, synchronously (the threads call these; so can tests).
  void ScrapeOnce(HttpClient& http) ABSL_LOCKS_EXCLUDED(mu_);
  void QueryDue(HttpClient& http, bool force = false) ABSL_LOCKS_EXCLUDED(mu_);
  void Publish() ABSL_LOCKS_EXCLUDED(mu_);

  void Start() ABSL_LOCKS_EXCLUDED(mu_);
  void Stop() ABSL_LOCKS_EXCLUDED(run_mu_);

 private:
  using TimePoint = Clock::TimePoint;
  struct Scrape {
    TimePoint at;
    std::vector<Sample> samples;
  };
  struct EndpointData {
    std::string model;
    bool last_ok = false;
    std::deque<Scrape> history;  // oldest first, bounded by the longest window
  };
  struct SignalState {
    router::SignalSpec spec;
    std::optional<double> value;  // from the last successful refresh
    TimePoint refreshed;          // last successful refresh (start time before any)
    TimePoint next_query;         // PromQL only
    std::string error;            // last refresh error
  };
  // Value of a scrape signal from the endpoint data; nullopt for no data. `error` says why.
  std::optional<double> Evaluate(const router::SignalSpec& spec, TimePoint now,
                                 std::string* error) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Value of a gateway signal now; nullopt (with `error`) when the model has no usable worker.
  // With the lock held (SignalEngineOptions::local_load).
  std::optional<double> EvaluateLocal(const router::SignalSpec& spec, std::string* error) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  double StaleAfter(const SignalState& s) const;

  using Live = std::vector<const EndpointData*>;
  // The oldest scrape inside the window (or the newest before it): a delta's starting point;
  // null when the endpoint has no scrape before its last.
  static const Scrape* WindowStart(const EndpointData& d, TimePoint window_start);
  // A counter's per-second increase over the window, summed across workers.
  static std::optional<double> WindowRate(const Live& live, const router::SignalSpec& spec,
                                          TimePoint window_start);
  // A histogram's quantile over the window, its buckets summed across workers.
  static std::optional<double> WindowQuantile(const Live& live, const router::SignalSpec& spec,
                                              TimePoint window_start);
  // The last scrape's value of every worker, aggregated (max, min, avg or sum).
  static std::optional<double> AcrossWorkers(const Live& live, const router::SignalSpec& spec,
                                             std::string* error);

  // A signal as the snapshot publishes it.
  struct SignalView {
    bool expired = false;  // stale for longer than its hold
    std::optional<double> value;
  };
  SignalView PublishSignal(const std::string& name, const SignalState& s, TimePoint now,
                           router::SignalSnapshot& snap) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateTrigger(const std::string& name, Trigger& t,
                     const std::map<std::string, SignalView>& views, TimePoint now,
                     router::SignalSnapshot& snap) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScrapeLoop() ABSL_LOCKS_EXCLUDED(run_mu_, mu_);
  void QueryLoop() ABSL_LOCKS_EXCLUDED(run_mu_, mu_);

  const WorkerPools* const pools_;
  GatewayMetrics* const metrics_;
  const SignalEngineOptions options_;
  Clock* const clock_;
  HttpFactory http_factory_;

  mutable absl::Mutex mu_;
  std::shared_ptr<const router::Policy> policy_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, EndpointData> endpoints_ ABSL_GUARDED_BY(mu_);  // by model/address
  std::map<std::string, SignalState> signals_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<Trigger>> triggers_ ABSL_GUARDED_BY(mu_);
  double history_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<std::shared_ptr<const router::SignalSnapshot>> snapshot_{
      std::make_shared<router::SignalSnapshot>()};

  absl::Mutex run_mu_;
  absl::CondVar run_cv_;
  bool stop_ ABSL_GUARDED_BY(run_mu_) = false;
  std::thread scrape_thread_;
  std::thread query_thread_;
};

// histogram_quantile over cumulative bucket counts (upper bound -> count, +Inf included), with
// Prometheus's linear interpolation inside the bucket; nullopt when there are no observations.
std::optional<double> HistogramQuantile(double q, const std::map<double, double>& buckets);

}  // namespace tandem::gateway
