#include <cmath>
#include <deque>
#include <map>

#include "gateway/prometheus_text.h"
#include "gateway/promql.h"
#include "gateway/signal_engine.h"
#include "gateway/trigger.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policies/policy_loader.h"
#include "tests/support/fake_worker_client.h"

namespace tandem::gateway {
namespace {

using ::testing::HasSubstr;

TEST(PrometheusTextTest, ParsesSamplesLabelsEscapesAndSpecialValues) {
  auto samples = ParsePrometheusText(R"(# HELP tandem_worker_num_requests_waiting Requests queued.
# TYPE tandem_worker_num_requests_waiting gauge
tandem_worker_num_requests_waiting{model_name="qwen"} 7
tandem_worker_time_to_first_token_seconds_bucket{model_name="qwen",le="0.1"} 3 1700000000000
tandem_worker_time_to_first_token_seconds_bucket{model_name="qwen",le="+Inf"} 5
weird{path="C:\\dir",quote="say \"hi\"",nl="a\nb",} -Inf
up 1e-3
nan_metric NaN
)");
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 6u);
  EXPECT_EQ((*samples)[0].name, "tandem_worker_num_requests_waiting");
  EXPECT_EQ((*samples)[0].labels.at("model_name"), "qwen");
  EXPECT_EQ((*samples)[0].value, 7);
  EXPECT_EQ((*samples)[2].labels.at("le"), "+Inf");
  EXPECT_EQ((*samples)[3].labels.at("path"), "C:\\dir");
  EXPECT_EQ((*samples)[3].labels.at("quote"), "say \"hi\"");
  EXPECT_EQ((*samples)[3].labels.at("nl"), "a\nb");
  EXPECT_TRUE(std::isinf((*samples)[3].value) && (*samples)[3].value < 0);
  EXPECT_DOUBLE_EQ((*samples)[4].value, 0.001);
  EXPECT_TRUE(std::isnan((*samples)[5].value));
}

TEST(PrometheusTextTest, MalformedLinesNameLineAndColumn) {
  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {"ok 1\n{x=\"1\"} 2\n", "line 2 column 1: expected a metric name"},
           {"m{x=1} 2", "line 1 column 5: expected '\"'"},
           {"m{x=\"1\" 2", "expected ',' or '}'"},
           {"m{x=\"1\"} two", "expected a number"},
           {"m 1 2 3", "unexpected text after the sample"},
           {"m{x=\"1\",x=\"2\"} 1", "duplicate label"},
           {"m{x=\"\\q\"} 1", "unknown escape"},
           {"m{x=\"open} 1", "unterminated label value"},
           {"m1", "expected a space before the value"}}) {
    auto r = ParsePrometheusText(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(want)) << text;
  }
}

TEST(PromQLResponseTest, ReadsOneSeriesScalarsAndEmptyResults) {
  auto one = ParsePromQLResponse(
      R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1700000000.1,"0.25"]}]}})");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_DOUBLE_EQ(**one, 0.25);
  auto scalar = ParsePromQLResponse(
      R"({"status":"success","data":{"resultType":"scalar","result":[1700000000,"3"]}})");
  ASSERT_TRUE(scalar.ok());
  EXPECT_DOUBLE_EQ(**scalar, 3);
  auto empty =
      ParsePromQLResponse(R"({"status":"success","data":{"resultType":"vector","result":[]}})");
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(empty->has_value());
  auto nan = ParsePromQLResponse(
      R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"NaN"]}]}})");
  ASSERT_TRUE(nan.ok());
  EXPECT_FALSE(nan->has_value());
}

TEST(PromQLResponseTest, ErrorsSayWhat) {
  EXPECT_THAT(
      std::string(
          ParsePromQLResponse(
              R"({"status":"error","errorType":"bad_data","error":"parse error at char 5"})")
              .status()
              .message()),
      HasSubstr("PromQL bad_data: parse error at char 5"));
  EXPECT_THAT(
      std::string(
          ParsePromQLResponse(
              R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"1"},"value":[1,"1"]},{"metric":{"a":"2"},"value":[1,"2"]}]}})")
              .status()
              .message()),
      HasSubstr("returned 2 series"));
  EXPECT_THAT(std::string(ParsePromQLResponse(
                              R"({"status":"success","data":{"resultType":"matrix","result":[]}})")
                              .status()
                              .message()),
              HasSubstr("result type 'matrix'"));
  EXPECT_FALSE(ParsePromQLResponse("not json").ok());
}

TEST(HistogramQuantileTest, InterpolatesLikePrometheus) {
  // 10 observations: 5 in (0, 0.1], 4 in (0.1, 0.5], 1 above 1.
  const std::map<double, double> b = {{0.1, 5}, {0.5, 9}, {1, 9}, {INFINITY, 10}};
  EXPECT_DOUBLE_EQ(*HistogramQuantile(0.5, b), 0.1);
  EXPECT_NEAR(*HistogramQuantile(0.7, b), 0.1 + 0.4 * (7 - 5) / 4.0, 1e-12);
  // In the +Inf bucket: the highest finite bound.
  EXPECT_DOUBLE_EQ(*HistogramQuantile(0.95, b), 1);
  EXPECT_FALSE(HistogramQuantile(0.5, {{0.1, 0}, {INFINITY, 0}}).has_value());
}

TEST(TriggerTest, HysteresisBandAndMinimumDwell) {
  router::TriggerSpec spec;
  spec.name = "busy";
  spec.enter = {router::Op::kGt, 10};
  spec.exit = {router::Op::kLt, 5};
  spec.min_dwell_seconds = 2;
  const auto t0 = std::chrono::steady_clock::now();
  auto at = [&](double s) {
    return t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(s));
  };
  Trigger t(spec, t0);
  EXPECT_FALSE(t.Update(Trigger::Input::kValue, 20, at(1)));  // dwell since creation: 1 s
  EXPECT_TRUE(t.Update(Trigger::Input::kValue, 20, at(2.5)));
  EXPECT_TRUE(t.on());
  // Inside the band: stays on. Below exit but within the dwell: stays on.
  EXPECT_FALSE(t.Update(Trigger::Input::kValue, 7, at(5)));
  EXPECT_FALSE(t.Update(Trigger::Input::kValue, 1, at(3)));
  EXPECT_TRUE(t.on());
  EXPECT_TRUE(t.Update(Trigger::Input::kValue, 1, at(5)));
  EXPECT_FALSE(t.on());
  // Between the thresholds never enters.
  EXPECT_FALSE(t.Update(Trigger::Input::kValue, 9, at(10)));
  // No data counts as the exit side; staleness forces at once, dwell or not.
  EXPECT_TRUE(t.Update(Trigger::Input::kForcedOn, 0, at(10.1)));
  EXPECT_TRUE(t.on());
  EXPECT_TRUE(t.Update(Trigger::Input::kForcedOff, 0, at(10.2)));
  EXPECT_TRUE(t.Update(Trigger::Input::kValue, 50, at(13)));
  EXPECT_TRUE(t.Update(Trigger::Input::kNoData, 0, at(16)));
  EXPECT_FALSE(t.on());
}

// A clock the test moves by hand.
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
      auto info = Info("nemotron", tandem::v1::WorkerInfo::READY);
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
  const tandem::v1::SignalsStatus status = engine.Describe();
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
