#include "gateway/signals/signal_engine.h"

#include <cmath>
#include <deque>
#include <map>

#include "gateway/signals/promql.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policies/policy_loader.h"
#include "tests/support/fake_worker_client.h"

namespace tandem::gateway {
namespace {

using ::testing::HasSubstr;

class ManualClock final : public Clock {
 public:
  TimePoint Now() const override { return now_; }
  void SleepUntil(TimePoint t) override { now_ = std::max(now_, t); }
  void Advance(double seconds) {
    now_ += std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(seconds));
  }

 private:
  TimePoint now_ = std::chrono::steady_clock::now();
};

// Serves canned bodies by URL; a URL without a body fails like a refused connection.
class FakeHttp final : public HttpClient {
 public:
  absl::StatusOr<std::string> Get(const std::string& url, absl::Duration) override {
    urls.push_back(url);
    for (const auto& [prefix, body] : bodies) {
      if (url.rfind(prefix, 0) == 0) return body;
    }
    return absl::UnavailableError("GET " + url + ": connection refused");
  }
  std::map<std::string, std::string> bodies;
  std::vector<std::string> urls;
};

std::shared_ptr<const router::Policy> Policy(const std::string& extra) {
  const std::string text = R"(schema: 1
version: t
models:
  qwen: {}
  nemotron: {}
classes: [a]
default_class: a
)" + extra + R"(
rules:
  - name: rest
    action: {route: qwen}
)";
  std::vector<policies::PolicyError> errors;
  auto p = policies::ParsePolicy(text, "t.yaml", &errors);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : nullptr;
}

class SignalEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* a : {"10.0.0.1:7001", "10.0.0.2:7001"}) {
      auto info = Info("nemotron", tandem::v1::WorkerInfo::STATE_READY);
      info.set_metrics_port(9001);
      pools_.AddEndpoint("nemotron", std::make_unique<FakeWorkerClient>(a, grpc::Status::OK, info));
    }
    for (const auto& e : *pools_.Find("nemotron")->endpoints()) {
      e->Probe(absl::Seconds(1), [] {});
    }
  }
  void Scrape(const std::string& a, const std::string& b) {
    http_.bodies["http://10.0.0.1:9001/metrics"] = a;
    if (b.empty()) {
      http_.bodies.erase("http://10.0.0.2:9001/metrics");
    } else {
      http_.bodies["http://10.0.0.2:9001/metrics"] = b;
    }
    engine_.ScrapeOnce(http_);
    engine_.Publish();
  }
  std::optional<double> Value(const std::string& name) {
    auto s = engine_.Current();
    auto it = s->values.find(name);
    return it == s->values.end() ? std::nullopt : std::optional<double>(it->second);
  }
  bool On(const std::string& name) { return engine_.Current()->triggers.at(name); }

  WorkerPools pools_{WorkerPoolsOptions{}, [] {}};
  ManualClock clock_;
  FakeHttp http_;
  SignalEngineOptions options_ = [] {
    SignalEngineOptions o;
    o.scrape_interval = absl::Milliseconds(250);
    o.prometheus_url = "http://prom:9090";
    return o;
  }();
  SignalEngine engine_{&pools_, nullptr, options_, &clock_};
};

TEST_F(SignalEngineTest, GaugesAggregateOverTheModelsWorkersAndFeedLoadForPicking) {
  engine_.SetPolicy(Policy(R"(signals:
  waiting_avg:
    scrape: {model: nemotron, metric: tandem_worker_num_requests_waiting, aggregate: avg}
  waiting_max:
    scrape: {model: nemotron, metric: tandem_worker_num_requests_waiting, aggregate: max}
)"));
  Scrape("tandem_worker_num_requests_waiting 4\ntandem_worker_num_requests_running 2\n",
         "tandem_worker_num_requests_waiting 10\n");
  ASSERT_TRUE(Value("waiting_avg").has_value());
  EXPECT_DOUBLE_EQ(*Value("waiting_avg"), 7);
  EXPECT_DOUBLE_EQ(*Value("waiting_max"), 10);
  EXPECT_EQ((*pools_.Find("nemotron")->endpoints())[0]->scraped_load(), 6);
  EXPECT_EQ(http_.urls.size(), 2u);
}

TEST_F(SignalEngineTest, RatesAndQuantilesComeFromDeltasBetweenScrapes) {
  engine_.SetPolicy(Policy(R"(signals:
  errors_per_s:
    scrape: {model: nemotron, metric: tandem_worker_requests_total, labels: {finish_reason: error}, aggregate: rate, window: 10s}
  ttft_p90:
    scrape: {model: nemotron, metric: ttft, aggregate: quantile, quantile: 0.9, window: 10s}
)"));
  auto body = [](int errors, int fast, int slow) {
    return absl::StrCat("tandem_worker_requests_total{finish_reason=\"error\"} ", errors, "\n",
                        "tandem_worker_requests_total{finish_reason=\"stop\"} 1000\n",
                        "ttft_bucket{le=\"0.1\"} ", fast, "\nttft_bucket{le=\"1\"} ", fast + slow,
                        "\nttft_bucket{le=\"+Inf\"} ", fast + slow, "\n");
  };
  Scrape(body(100, 1000, 0), "");
  EXPECT_FALSE(Value("errors_per_s").has_value());  // one scrape: no delta yet
  clock_.Advance(2);
  // 20 errors in 2 s; 10 new observations, all slow: the old fast ones do not count.
  Scrape(body(120, 1000, 10), "");
  ASSERT_TRUE(Value("errors_per_s").has_value());
  EXPECT_DOUBLE_EQ(*Value("errors_per_s"), 10);
  EXPECT_NEAR(*Value("ttft_p90"), 0.1 + 0.9 * 0.9, 1e-9);
  // A worker restart resets its counters: counted from zero, never negative.
  clock_.Advance(2);
  Scrape(body(4, 0, 2), "");
  EXPECT_GE(*Value("errors_per_s"), 0);
}

TEST_F(SignalEngineTest, StaleSignalsHoldThenFailOpenOrClosed) {
  engine_.SetPolicy(Policy(R"(signals:
  open_q:
    scrape: {model: nemotron, metric: q}
    stale: {after: 1s, hold: 2s, then: fail_open}
  closed_q:
    scrape: {model: nemotron, metric: q}
    stale: {after: 1s, hold: 2s, then: fail_closed}
triggers:
  open_busy: {signal: open_q, enter: {gt: 5}, exit: {lt: 1}}
  closed_busy: {signal: closed_q, enter: {gt: 5}, exit: {lt: 1}}
)"));
  Scrape("q 2\n", "q 2\n");  // summed over the two workers: 4
  EXPECT_FALSE(On("open_busy"));
  EXPECT_FALSE(On("closed_busy"));
  // Every worker stops answering its /metrics.
  http_.bodies.clear();
  clock_.Advance(1.5);
  engine_.ScrapeOnce(http_);
  engine_.Publish();
  // Stale but within the hold: the last value still counts.
  ASSERT_TRUE(Value("open_q").has_value());
  EXPECT_DOUBLE_EQ(*Value("open_q"), 4);
  const auto described = engine_.Describe();
  EXPECT_TRUE(described.signals(1).stale());
  EXPECT_THAT(described.signals(1).error(), HasSubstr("no fresh scrape"));
  clock_.Advance(2);
  engine_.ScrapeOnce(http_);
  engine_.Publish();
  EXPECT_FALSE(Value("open_q").has_value());
  EXPECT_FALSE(On("open_busy"));
  EXPECT_TRUE(On("closed_busy"));
  // Fresh data again: the closed trigger follows its thresholds once more.
  Scrape("q 0\n", "");
  EXPECT_FALSE(On("closed_busy"));
}

TEST_F(SignalEngineTest, PromQLSignalsQueryAtTheirIntervalAndReportErrors) {
  engine_.SetPolicy(Policy(R"(signals:
  p95:
    promql: 'histogram_quantile(0.95, sum by (le) (rate(x_bucket[1m])))'
    interval: 2s
triggers:
  slow: {signal: p95, enter: {gt: 0.5}, exit: {lt: 0.2}, min_dwell: 0s}
)"));
  http_.bodies["http://prom:9090/api/v1/query?query=histogram_quantile%280.95"] =
      R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"0.8"]}]}})";
  engine_.QueryDue(http_);
  engine_.Publish();
  ASSERT_TRUE(Value("p95").has_value());
  EXPECT_DOUBLE_EQ(*Value("p95"), 0.8);
  EXPECT_TRUE(On("slow"));
  ASSERT_EQ(http_.urls.size(), 1u);
  engine_.QueryDue(http_);  // not due yet
  EXPECT_EQ(http_.urls.size(), 1u);
  clock_.Advance(2.1);
  http_.bodies.clear();
  engine_.QueryDue(http_);
  EXPECT_EQ(http_.urls.size(), 2u);
  EXPECT_THAT(engine_.Describe().signals(0).error(), HasSubstr("connection refused"));
}

// Where a backlog waits (the gateway's fair queue or the workers' queues) does not change what
// a trigger on the sum sees; a sum keeps a value while any term has one.
TEST_F(SignalEngineTest, GatewaySignalsReadDispatchStateAndSumsAddSignals) {
  ModelLoad load{.queued = 30, .inflight = 12, .usable_workers = 2};
  SignalEngineOptions options = options_;
  options.local_load = [&](const std::string& model) -> std::optional<ModelLoad> {
    if (model != "nemotron") return std::nullopt;
    return load;
  };
  SignalEngine engine(&pools_, nullptr, options, &clock_);
  auto policy = Policy(R"(signals:
  worker_q:
    scrape: {model: nemotron, metric: tandem_worker_num_requests_waiting, aggregate: avg}
  gateway_q:
    gateway: {model: nemotron, metric: queued, aggregate: avg}
  gateway_inflight:
    gateway: {model: nemotron, metric: inflight}
  offset: 1
  backlog:
    sum: [worker_q, gateway_q]
  backlog_plus_one:
    sum: [backlog_q_none, offset]
  backlog_q_none:
    scrape: {model: nemotron, metric: absent_metric}
triggers:
  saturated: {signal: backlog, enter: {gt: 8}, exit: {lt: 2}}
)");
  ASSERT_NE(policy, nullptr);
  ASSERT_TRUE(engine.Validate(*policy).ok());
  engine.SetPolicy(policy);
  auto value = [&](const std::string& name) -> std::optional<double> {
    auto s = engine.Current();
    auto it = s->values.find(name);
    return it == s->values.end() ? std::nullopt : std::optional<double>(it->second);
  };
  http_.bodies["http://10.0.0.1:9001/metrics"] = "tandem_worker_num_requests_waiting 1\n";
  http_.bodies["http://10.0.0.2:9001/metrics"] = "tandem_worker_num_requests_waiting 1\n";
  engine.ScrapeOnce(http_);
  engine.Publish();
  EXPECT_DOUBLE_EQ(value("gateway_q").value_or(-1), 15);  // 30 queued over 2 usable workers
  EXPECT_DOUBLE_EQ(value("gateway_inflight").value_or(-1), 12);
  EXPECT_DOUBLE_EQ(value("backlog").value_or(-1), 16);
  EXPECT_DOUBLE_EQ(value("backlog_plus_one").value_or(-1), 1);  // the term without data is 0
  EXPECT_TRUE(engine.Current()->triggers.at("saturated"));

  // The backlog moves into the workers' queues: the sum, and the trigger, stay where they were.
  load.queued = 0;
  http_.bodies["http://10.0.0.1:9001/metrics"] = "tandem_worker_num_requests_waiting 16\n";
  http_.bodies["http://10.0.0.2:9001/metrics"] = "tandem_worker_num_requests_waiting 16\n";
  clock_.Advance(0.25);
  engine.ScrapeOnce(http_);
  engine.Publish();
  EXPECT_DOUBLE_EQ(value("gateway_q").value_or(-1), 0);
  EXPECT_DOUBLE_EQ(value("backlog").value_or(-1), 16);
  EXPECT_TRUE(engine.Current()->triggers.at("saturated"));

  // No usable worker: a per-worker average has no value once its last one is stale (and says
  // why); the sum, with no term left, has none either and its trigger fails open.
  load.usable_workers = 0;
  clock_.Advance(0.25);
  engine.ScrapeOnce(http_);
  engine.Publish();
  EXPECT_DOUBLE_EQ(value("backlog").value_or(-1), 16);
  clock_.Advance(1);
  engine.Publish();
  EXPECT_FALSE(value("gateway_q").has_value());
  EXPECT_FALSE(value("gateway_inflight").has_value());  // gateway signals refresh with scrapes
  bool described = false;
  const tandem::v1::GetSignalsResponse status = engine.Describe();
  for (const auto& s : status.signals()) {
    if (s.name() != "gateway_q") continue;
    described = true;
    EXPECT_EQ(s.source(), "gateway");
    EXPECT_THAT(s.error(), HasSubstr("no usable worker"));
  }
  EXPECT_TRUE(described);
  EXPECT_FALSE(value("backlog").has_value());
  EXPECT_FALSE(engine.Current()->triggers.at("saturated"));  // fail open
}

TEST_F(SignalEngineTest, ValidateRefusesPromQLWithoutAServer) {
  SignalEngine no_prom(&pools_, nullptr, SignalEngineOptions{}, &clock_);
  auto p = Policy(R"(signals:
  p95: {promql: 'up'}
  q: {scrape: {model: qwen, metric: q}}
)");
  const absl::Status s = no_prom.Validate(*p);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("without --prometheus_url"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("reads model 'qwen', which has no workers"));
}

}  // namespace
}  // namespace tandem::gateway
