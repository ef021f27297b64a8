#include "gateway/signals/signal_engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/steady_wait.h"
#include "gateway/signals/promql.h"
#include "spdlog/spdlog.h"

namespace tandem::gateway {
namespace {

// Sum of the samples named `name` that carry `labels`; nullopt when there are none.
std::optional<double> SumMatching(const std::vector<Sample>& samples, const std::string& name,
                                  const std::map<std::string, std::string>& labels) {
  std::optional<double> sum;
  for (const Sample& s : samples) {
    if (s.name == name && LabelsMatch(s.labels, labels)) sum = sum.value_or(0) + s.value;
  }
  return sum;
}

// Cumulative bucket counts by upper bound, summed over the series that carry `labels`.
std::map<double, double> Buckets(const std::vector<Sample>& samples, const std::string& name,
                                 const std::map<std::string, std::string>& labels) {
  std::map<double, double> out;
  const std::string bucket = name + "_bucket";
  for (const Sample& s : samples) {
    if (s.name != bucket || !LabelsMatch(s.labels, labels)) continue;
    auto le = s.labels.find("le");
    if (le == s.labels.end()) continue;
    double bound = 0;
    if (le->second == "+Inf") {
      bound = std::numeric_limits<double>::infinity();
    } else if (!absl::SimpleAtod(le->second, &bound)) {
      continue;
    }
    out[bound] += s.value;
  }
  return out;
}

const char* SourceName(router::SignalSource s) {
  switch (s) {
    case router::SignalSource::kStatic:
      return "static";
    case router::SignalSource::kScrape:
      return "scrape";
    case router::SignalSource::kPromQL:
      return "promql";
    case router::SignalSource::kGateway:
      return "gateway";
    case router::SignalSource::kSum:
      return "sum";
  }
  return "?";
}

bool SameSource(const router::SignalSpec& a, const router::SignalSpec& b) {
  return a.source == b.source && a.model == b.model && a.metric == b.metric &&
         a.labels == b.labels && a.aggregate == b.aggregate && a.quantile == b.quantile &&
         a.window_seconds == b.window_seconds && a.query == b.query &&
         a.gateway_metric == b.gateway_metric && a.terms == b.terms;
}

}  // namespace

std::optional<double> HistogramQuantile(double q, const std::map<double, double>& buckets) {
  if (buckets.empty()) return std::nullopt;
  const double total = buckets.rbegin()->second;
  if (!(total > 0)) return std::nullopt;
  const double rank = q * total;
  double lower = 0;
  double below = 0;
  for (auto it = buckets.begin(); it != buckets.end(); ++it) {
    const auto [upper, count] = *it;
    if (count >= rank) {
      // Above every finite bound: the highest finite bound, as Prometheus answers.
      if (std::isinf(upper)) return lower;
      if (it == buckets.begin() && upper <= 0) return upper;
      if (count == below) return upper;
      return lower + (upper - lower) * (rank - below) / (count - below);
    }
    lower = upper;
    below = count;
  }
  return lower;
}

SignalEngine::SignalEngine(const WorkerPools* pools, GatewayMetrics* metrics,
                           SignalEngineOptions options, Clock* clock, HttpFactory http_factory)
    : pools_(pools),
      metrics_(metrics),
      options_(std::move(options)),
      clock_(clock),
      http_factory_(std::move(http_factory)) {}

SignalEngine::~SignalEngine() { Stop(); }

double SignalEngine::StaleAfter(const SignalState& s) const {
  if (s.spec.stale_after_seconds > 0) return s.spec.stale_after_seconds;
  const double interval = s.spec.source == router::SignalSource::kPromQL
                              ? s.spec.interval_seconds
                              : absl::ToDoubleSeconds(options_.scrape_interval);
  return 3 * interval;
}

absl::Status SignalEngine::Validate(const router::Policy& policy) const {
  std::vector<std::string> problems;
  for (const auto& [name, spec] : policy.signals) {
    if (spec.source == router::SignalSource::kPromQL && options_.prometheus_url.empty()) {
      problems.push_back(absl::StrCat("signals.", name,
                                      ": a PromQL signal, but the gateway was started without "
                                      "--prometheus_url"));
    }
    if ((spec.source == router::SignalSource::kScrape ||
         spec.source == router::SignalSource::kGateway) &&
        pools_->Find(spec.model) == nullptr) {
      problems.push_back(absl::StrCat("signals.", name, ": reads model '", spec.model,
                                      "', which has no workers configured"));
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrJoin(problems, "\n"));
}

void SignalEngine::SetPolicy(std::shared_ptr<const router::Policy> policy) {
  absl::MutexLock l(&mu_);
  const TimePoint now = clock_->Now();
  std::map<std::string, SignalState> signals;
  double history = 3 * absl::ToDoubleSeconds(options_.scrape_interval);
  for (const auto& [name, spec] : policy->signals) {
    SignalState s;
    auto old = signals_.find(name);
    if (old != signals_.end() && SameSource(old->second.spec, spec)) {
      s = old->second;
    } else {
      s.refreshed = now;
      s.next_query = now;
    }
    s.spec = spec;
    if (spec.source == router::SignalSource::kScrape) {
      history = std::max(history,
                         spec.window_seconds + 2 * absl::ToDoubleSeconds(options_.scrape_interval));
    }
    if (metrics_ != nullptr) metrics_->ForSignal(name);
    signals.emplace(name, std::move(s));
  }
  std::map<std::string, std::unique_ptr<Trigger>> triggers;
  for (const auto& [name, spec] : policy->triggers) {
    auto old = triggers_.find(name);
    const bool keep = old != triggers_.end() && old->second->spec().signal == spec.signal;
    triggers.emplace(name, std::make_unique<Trigger>(spec, keep ? old->second->since() : now,
                                                     keep && old->second->on()));
    if (metrics_ != nullptr) metrics_->ForTrigger(name);
  }
  signals_ = std::move(signals);
  triggers_ = std::move(triggers);
  history_seconds_ = history;
  policy_ = std::move(policy);
}

void SignalEngine::ScrapeOnce(HttpClient& http) {
  struct Target {
    std::shared_ptr<Endpoint> endpoint;
    std::string key;
    std::string url;
  };
  std::vector<Target> targets;
  for (const auto& [model, pool] : pools_->pools()) {
    for (const auto& e : *pool->endpoints()) {
      std::string url = e->metrics_url();
      if (url.empty()) continue;
      targets.push_back({e, absl::StrCat(model, "/", e->address()), std::move(url)});
    }
  }
  struct Result {
    const Target* target;
    absl::StatusOr<std::vector<Sample>> samples;
    TimePoint at;
  };
  std::vector<Result> results;
  results.reserve(targets.size());
  for (const Target& t : targets) {
    absl::StatusOr<std::string> body = http.Get(t.url, options_.scrape_timeout);
    absl::StatusOr<std::vector<Sample>> samples =
        body.ok() ? ParsePrometheusText(*body) : absl::StatusOr<std::vector<Sample>>(body.status());
    if (samples.ok()) {
      const double running =
          SumMatching(*samples, "tandem_worker_num_requests_running", {}).value_or(0);
      const double waiting =
          SumMatching(*samples, "tandem_worker_num_requests_waiting", {}).value_or(0);
      t.endpoint->set_scraped_load(static_cast<int64_t>(running + waiting));
    } else {
      spdlog::debug("scrape {} failed: {}", t.url, std::string(samples.status().message()));
    }
    if (metrics_ != nullptr) metrics_->CountScrape(t.endpoint->model(), samples.ok());
    results.push_back({&t, std::move(samples), clock_->Now()});
  }

  absl::MutexLock l(&mu_);
  const TimePoint now = clock_->Now();
  std::map<std::string, EndpointData> kept;
  for (Result& r : results) {
    EndpointData& d = kept[r.target->key];
    auto old = endpoints_.find(r.target->key);
    if (old != endpoints_.end()) d = std::move(old->second);
    d.model = r.target->endpoint->model();
    d.last_ok = r.samples.ok();
    if (r.samples.ok()) d.history.push_back({r.at, std::move(*r.samples)});
    const auto horizon = now - std::chrono::duration_cast<Clock::TimePoint::duration>(
                                   std::chrono::duration<double>(history_seconds_));
    // Keep one scrape at or before the horizon so a window always has its starting point.
    while (d.history.size() > 2 && d.history[1].at <= horizon) d.history.pop_front();
  }
  endpoints_ = std::move(kept);

  // Gateway signals refresh with the scrapes: at the same rate, so a sum of the two compares
  // like with like, and a momentary burst in the gateway's queue is not sampled 20 times a second.
  for (auto& [name, s] : signals_) {
    std::string error;
    std::optional<double> v;
    if (s.spec.source == router::SignalSource::kScrape) {
      v = Evaluate(s.spec, now, &error);
    } else if (s.spec.source == router::SignalSource::kGateway) {
      v = EvaluateLocal(s.spec, &error);
    } else {
      continue;
    }
    if (error.empty()) {
      s.value = v;
      s.refreshed = now;
      s.error.clear();
    } else {
      s.error = error;
      if (metrics_ != nullptr) metrics_->ForSignal(name).errors->Increment();
    }
  }
}

std::optional<double> SignalEngine::Evaluate(const router::SignalSpec& spec, TimePoint now,
                                             std::string* error) const {
  const double fresh = 3 * absl::ToDoubleSeconds(options_.scrape_interval);
  Live live;
  for (const auto& [key, d] : endpoints_) {
    if (d.model == spec.model && d.last_ok && !d.history.empty() &&
        Seconds(now - d.history.back().at) <= fresh) {
      live.push_back(&d);
    }
  }
  if (live.empty()) {
    *error = absl::StrCat("no fresh scrape of any worker of model '", spec.model, "'");
    return std::nullopt;
  }
  const auto window_start = now - std::chrono::duration_cast<Clock::TimePoint::duration>(
                                      std::chrono::duration<double>(spec.window_seconds));
  switch (spec.aggregate) {
    case router::Aggregate::kRate:
      return WindowRate(live, spec, window_start);
    case router::Aggregate::kQuantile:
      return WindowQuantile(live, spec, window_start);
    default:
      return AcrossWorkers(live, spec, error);
  }
}

const SignalEngine::Scrape* SignalEngine::WindowStart(const EndpointData& d,
                                                      TimePoint window_start) {
  const Scrape* start = nullptr;
  for (const Scrape& s : d.history) {
    start = &s;
    if (s.at >= window_start) break;
  }
  return start == &d.history.back() ? nullptr : start;
}

std::optional<double> SignalEngine::WindowRate(const Live& live, const router::SignalSpec& spec,
                                               TimePoint window_start) {
  std::optional<double> rate;
  for (const EndpointData* d : live) {
    const Scrape* start = WindowStart(*d, window_start);
    if (start == nullptr) continue;
    const Scrape& end = d->history.back();
    const auto a = SumMatching(start->samples, spec.metric, spec.labels);
    const auto b = SumMatching(end.samples, spec.metric, spec.labels);
    if (!b) continue;
    // A worker restart resets its counters: count from zero.
    const double increase = !a || *b < *a ? *b : *b - *a;
    rate = rate.value_or(0) + increase / Seconds(end.at - start->at);
  }
  return rate;
}

std::optional<double> SignalEngine::WindowQuantile(const Live& live, const router::SignalSpec& spec,
                                                   TimePoint window_start) {
  std::map<double, double> sum;
  for (const EndpointData* d : live) {
    const Scrape* start = WindowStart(*d, window_start);
    if (start == nullptr) continue;
    const auto a = Buckets(start->samples, spec.metric, spec.labels);
    const auto b = Buckets(d->history.back().samples, spec.metric, spec.labels);
    const bool reset = !a.empty() && !b.empty() && b.rbegin()->second < a.rbegin()->second;
    for (const auto& [le, count] : b) {
      auto it = a.find(le);
      sum[le] += reset || it == a.end() ? count : count - it->second;
    }
  }
  return HistogramQuantile(spec.quantile, sum);
}

std::optional<double> SignalEngine::AcrossWorkers(const Live& live, const router::SignalSpec& spec,
                                                  std::string* error) {
  std::vector<double> values;
  for (const EndpointData* d : live) {
    if (auto v = SumMatching(d->history.back().samples, spec.metric, spec.labels)) {
      values.push_back(*v);
    }
  }
  if (values.empty()) {
    *error = absl::StrCat("the workers of model '", spec.model, "' export no sample named ",
                          spec.metric, " with the given labels");
    return std::nullopt;
  }
  switch (spec.aggregate) {
    case router::Aggregate::kMax:
      return *std::max_element(values.begin(), values.end());
    case router::Aggregate::kMin:
      return *std::min_element(values.begin(), values.end());
    case router::Aggregate::kAvg:
      return std::accumulate(values.begin(), values.end(), 0.0) / values.size();
    default:
      return std::accumulate(values.begin(), values.end(), 0.0);
  }
}

std::optional<double> SignalEngine::EvaluateLocal(const router::SignalSpec& spec,
                                                  std::string* error) const {
  std::optional<ModelLoad> load;
  if (options_.local_load) load = options_.local_load(spec.model);
  if (!load) {
    *error = absl::StrCat("this gateway does not serve model '", spec.model, "'");
    return std::nullopt;
  }
  const double total =
      spec.gateway_metric == router::GatewayMetric::kQueued ? load->queued : load->inflight;
  if (spec.aggregate != router::Aggregate::kAvg) return total;
  if (load->usable_workers == 0) {
    *error = absl::StrCat("model '", spec.model, "' has no usable worker");
    return std::nullopt;
  }
  return total / load->usable_workers;
}

void SignalEngine::QueryDue(HttpClient& http, bool force) {
  struct Due {
    std::string name;
    std::string query;
  };
  std::vector<Due> due;
  {
    absl::MutexLock l(&mu_);
    const TimePoint now = clock_->Now();
    for (auto& [name, s] : signals_) {
      if (s.spec.source != router::SignalSource::kPromQL || (!force && now < s.next_query)) {
        continue;
      }
      s.next_query = now + std::chrono::duration_cast<Clock::TimePoint::duration>(
                               std::chrono::duration<double>(s.spec.interval_seconds));
      due.push_back({name, s.spec.query});
    }
  }
  for (const Due& d : due) {
    absl::StatusOr<std::optional<double>> v;
    if (options_.prometheus_url.empty()) {
      v = absl::FailedPreconditionError(
          "PromQL signal, but the gateway has no --prometheus_url to query");
    } else {
      const std::string url = absl::StrCat(options_.prometheus_url,
                                           "/api/v1/query?query=", CurlHttpClient::Escape(d.query));
      absl::StatusOr<std::string> body = http.Get(url, options_.promql_timeout);
      v = body.ok() ? ParsePromQLResponse(*body)
                    : absl::StatusOr<std::optional<double>>(body.status());
    }
    absl::MutexLock l(&mu_);
    auto it = signals_.find(d.name);
    if (it == signals_.end() || it->second.spec.query != d.query) continue;  // policy changed
    SignalState& s = it->second;
    if (v.ok()) {
      s.value = *v;
      s.refreshed = clock_->Now();
      s.error.clear();
    } else {
      if (s.error != v.status().message()) {
        spdlog::warn("signal {}: {}", d.name, std::string(v.status().message()));
      }
      s.error = std::string(v.status().message());
      if (metrics_ != nullptr) metrics_->ForSignal(d.name).errors->Increment();
    }
  }
}

void SignalEngine::Publish() {
  auto snap = std::make_shared<router::SignalSnapshot>();
  absl::MutexLock l(&mu_);
  const TimePoint now = clock_->Now();
  std::map<std::string, SignalView> views;
  for (auto& [name, s] : signals_) {
    if (s.spec.source == router::SignalSource::kStatic ||
        s.spec.source == router::SignalSource::kSum) {
      continue;
    }
    views[name] = PublishSignal(name, s, now, *snap);
  }
  // Sums last: they add the values just published (a static term adds its constant).
  for (auto& [name, s] : signals_) {
    if (s.spec.source != router::SignalSource::kSum) continue;
    std::optional<double> sum;
    for (const std::string& term : s.spec.terms) {
      auto t = signals_.find(term);
      if (t != signals_.end() && t->second.spec.source == router::SignalSource::kStatic) {
        sum = sum.value_or(0) + t->second.spec.static_value;
      } else if (auto v = views.find(term); v != views.end() && v->second.value) {
        sum = sum.value_or(0) + *v->second.value;
      }
    }
    if (sum) {
      s.value = sum;
      s.refreshed = now;
      s.error.clear();
    } else {
      s.error = "none of its terms has a value";
    }
    views[name] = PublishSignal(name, s, now, *snap);
  }
  for (auto& [name, t] : triggers_) UpdateTrigger(name, *t, views, now, *snap);
  snapshot_.store(std::move(snap));
}

SignalEngine::SignalView SignalEngine::PublishSignal(const std::string& name, const SignalState& s,
                                                     TimePoint now,
                                                     router::SignalSnapshot& snap) const {
  const double age = Seconds(now - s.refreshed);
  const double stale_after = StaleAfter(s);
  SignalView v;
  v.expired = age > stale_after + s.spec.hold_seconds;
  if (!v.expired) v.value = s.value;
  if (v.value) snap.values[name] = *v.value;
  if (metrics_ != nullptr) {
    const GatewayMetrics::Signal m = metrics_->ForSignal(name);
    m.value->Set(v.value ? *v.value : std::nan(""));
    m.stale->Set(age > stale_after ? 1 : 0);
    m.age->Set(age);
  }
  return v;
}

void SignalEngine::UpdateTrigger(const std::string& name, Trigger& t,
                                 const std::map<std::string, SignalView>& views, TimePoint now,
                                 router::SignalSnapshot& snap) const {
  const router::TriggerSpec& spec = t.spec();
  Trigger::Input input = Trigger::Input::kNoData;
  double value = 0;
  auto sig = signals_.find(spec.signal);
  if (sig != signals_.end() && sig->second.spec.source == router::SignalSource::kStatic) {
    input = Trigger::Input::kValue;
    value = sig->second.spec.static_value;
  } else if (auto v = views.find(spec.signal); v != views.end()) {
    if (v->second.expired) {
      input = sig->second.spec.fail_closed ? Trigger::Input::kForcedOn : Trigger::Input::kForcedOff;
    } else if (v->second.value) {
      input = Trigger::Input::kValue;
      value = *v->second.value;
    }
  }
  if (t.Update(input, value, now)) {
    spdlog::info("trigger {} turned {} (signal {}={})", name, t.on() ? "on" : "off", spec.signal,
                 input == Trigger::Input::kValue    ? absl::StrCat(value)
                 : input == Trigger::Input::kNoData ? std::string("no data")
                                                    : std::string("stale"));
    if (metrics_ != nullptr) metrics_->ForTrigger(name).transitions->Increment();
  }
  if (metrics_ != nullptr) metrics_->ForTrigger(name).active->Set(t.on() ? 1 : 0);
  snap.triggers[name] = t.on();
}

tandem::v1::GetSignalsResponse SignalEngine::Describe() const {
  tandem::v1::GetSignalsResponse out;
  absl::MutexLock l(&mu_);
  const TimePoint now = clock_->Now();
  for (const auto& [name, s] : signals_) {
    auto* o = out.add_signals();
    o->set_name(name);
    o->set_source(SourceName(s.spec.source));
    if (s.spec.source == router::SignalSource::kStatic) {
      o->set_has_value(true);
      o->set_value(s.spec.static_value);
      continue;
    }
    const double age = Seconds(now - s.refreshed);
    const bool expired = age > StaleAfter(s) + s.spec.hold_seconds;
    o->set_has_value(s.value.has_value() && !expired);
    if (o->has_value()) o->set_value(*s.value);
    o->set_age_seconds(age);
    o->set_stale(age > StaleAfter(s));
    o->set_error(s.error);
  }
  for (const auto& [name, t] : triggers_) {
    auto* o = out.add_triggers();
    o->set_name(name);
    o->set_on(t->on());
    o->set_seconds_in_state(Seconds(now - t->since()));
  }
  return out;
}

void SignalEngine::ScrapeLoop() {
  std::unique_ptr<HttpClient> http =
      http_factory_
          ? http_factory_()
          : std::make_unique<CurlHttpClient>(options_.scrape_tls, options_.scrape_tls_server_name);
  const auto period = absl::ToChronoNanoseconds(options_.scrape_interval);
  absl::MutexLock l(&run_mu_);
  while (!stop_) {
    run_mu_.Unlock();
    ScrapeOnce(*http);
    Publish();
    run_mu_.Lock();
    const auto deadline = std::chrono::steady_clock::now() + period;
    while (!stop_ && WaitUntil(run_cv_, run_mu_, deadline)) {
    }
  }
}

void SignalEngine::QueryLoop() {
  // The Prometheus server is not a worker: no worker TLS files (an https URL uses system roots).
  std::unique_ptr<HttpClient> http =
      http_factory_ ? http_factory_() : std::make_unique<CurlHttpClient>();
  absl::MutexLock l(&run_mu_);
  while (!stop_) {
    run_mu_.Unlock();
    QueryDue(*http);
    Publish();
    run_mu_.Lock();
    // PromQL intervals are at least 100 ms; checking at that rate is enough.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
    while (!stop_ && WaitUntil(run_cv_, run_mu_, deadline)) {
    }
  }
}

void SignalEngine::Start() {
  Publish();
  scrape_thread_ = std::thread([this] { ScrapeLoop(); });
  query_thread_ = std::thread([this] { QueryLoop(); });
}

void SignalEngine::Stop() {
  {
    absl::MutexLock l(&run_mu_);
    stop_ = true;
  }
  run_cv_.SignalAll();
  if (scrape_thread_.joinable()) scrape_thread_.join();
  if (query_thread_.joinable()) query_thread_.join();
}

}  // namespace tandem::gateway
