// Costs of the gateway's per-request CPU work: validation, feature extraction and the built-in
// routing decision, for the seeds' prompt sizes (about 16, 128 and 700 tokens) and a long
// document. Run: build/tests/intake_benchmark
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/request_validation.h"
#include "common/sha256.h"
#include "common/utf8.h"
#include "gateway/dispatch/fair_queue.h"
#include "gateway/intake/prompt_token_counter.h"
#include "gateway/intake/tenants.h"
#include "gateway/metrics/gateway_metrics.h"
#include "policies/policy_loader.h"
#include "router/builtin_router.h"
#include "router/policy_router.h"
#include "router/request_features.h"
#include "tests/support/test_paths.h"
#include "workers/stop_matcher.h"

namespace {

std::string Text(int approx_tokens) {
  static const std::string kSentence = "The quick brown fox jumps over the lazy dog again. ";
  std::string s;
  while (static_cast<int>(s.size()) < approx_tokens * 4) s += kSentence;
  return s;
}

tandem::v1::GenerateRequest Request(int approx_tokens) {
  tandem::v1::GenerateRequest r;
  auto* m = r.add_messages();
  m->set_role("user");
  m->add_content()->set_text(Text(approx_tokens));
  r.mutable_sampling()->set_max_tokens(256);
  r.mutable_sampling()->set_temperature(0.7f);
  return r;
}

// Per request with tenants: the key's hash and lookup, then the quota check and release.
void BM_AuthenticateAndAdmit(benchmark::State& state) {
  prometheus::Registry registry;
  tandem::gateway::GatewayMetrics metrics(registry, {"qwen"}, {"c"}, "bench");
  tandem::gateway::TenantRegistry tenants({}, &metrics);
  std::string yaml = "tenants:\n";
  for (int i = 0; i < 100; ++i) {
    yaml += "  - name: t" + std::to_string(i) +
            "\n    keys: [sha256:" + tandem::Sha256Hex("key-" + std::to_string(i)) +
            "]\n    limits: {requests_per_second: 1e9, tokens_per_second: 1e12, "
            "max_concurrency: 1000}\n";
  }
  tenants.Apply(*tandem::policies::ParseTenantConfig(yaml, "bench.yaml", {}));
  const std::string key = "key-42";
  for (auto _ : state) {
    auto caller = tenants.Authenticate(key);
    benchmark::DoNotOptimize(caller->tenant->TryAdmit(300, std::chrono::steady_clock::now()));
    caller->tenant->Release(0);
  }
}
BENCHMARK(BM_AuthenticateAndAdmit);

// A dispatch slot taken and given back, uncontended (the fast path of every request).
void BM_FairQueueUncontended(benchmark::State& state) {
  tandem::gateway::FairQueue queue({1024, 256});
  tandem::gateway::FairQueue::Waiter w{nullptr, "t"};
  for (auto _ : state) {
    benchmark::DoNotOptimize(queue.Acquire(&w, 1));
    queue.Release();
  }
}
BENCHMARK(BM_FairQueueUncontended);

void BM_ValidateMessages(benchmark::State& state) {
  const auto r = Request(static_cast<int>(state.range(0)));
  const tandem::RequestLimits limits;
  for (auto _ : state) benchmark::DoNotOptimize(tandem::ValidateMessages(r.messages(), limits));
  state.SetBytesProcessed(state.iterations() * r.messages(0).content(0).text().size());
}
BENCHMARK(BM_ValidateMessages)->Arg(16)->Arg(128)->Arg(700)->Arg(50000);

void BM_ExtractFeaturesAndRoute(benchmark::State& state) {
  const auto r = Request(static_cast<int>(state.range(0)));
  const tandem::router::BuiltinRouter router({});
  for (auto _ : state) {
    auto features = tandem::router::ExtractFeatures(r);
    benchmark::DoNotOptimize(router.Route(features));
  }
}
BENCHMARK(BM_ExtractFeaturesAndRoute)->Arg(16)->Arg(128)->Arg(700)->Arg(50000);

void BM_RouteOnly(benchmark::State& state) {
  const tandem::router::BuiltinRouter router({});
  const auto features = tandem::router::ExtractFeatures(Request(128));
  for (auto _ : state) benchmark::DoNotOptimize(router.Route(features));
}
BENCHMARK(BM_RouteOnly);

// The shipped default policy, loaded once; null, and `state` told to skip, when it cannot be.
std::shared_ptr<const tandem::router::Policy> DefaultPolicy(benchmark::State& state) {
  static const auto* policy = [] {
    std::vector<tandem::policies::PolicyError> errors;
    return new absl::StatusOr<std::shared_ptr<const tandem::router::Policy>>(
        tandem::policies::LoadPolicyFile(tandem::testing::SourcePath("/policies/default.yaml"),
                                         &errors));
  }();
  if (!policy->ok()) {
    state.SkipWithError("cannot load policies/default.yaml");
    return nullptr;
  }
  return **policy;
}

// The shipped default policy: classification and rules for a 128-token prompt, explanation
// included.
void BM_DefaultPolicyRoute(benchmark::State& state) {
  const auto policy = DefaultPolicy(state);
  if (policy == nullptr) return;
  const tandem::router::PolicyRouter router(policy);
  auto features = tandem::router::ExtractFeatures(Request(128));
  features.objective = static_cast<tandem::router::Objective>(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(router.Route(features));
}
// 0: falls through to the last rule; 2: latency objective, matched by the fourth rule.
BENCHMARK(BM_DefaultPolicyRoute)->Arg(0)->Arg(2);

// The learned tier alone on a prompt of state.range(0) bytes (the bound: 4 KB in
// p99 <= 100 us).
void BM_LearnedClassifier(benchmark::State& state) {
  const auto policy = DefaultPolicy(state);
  if (policy == nullptr) return;
  if (policy->classifier == nullptr) {
    state.SkipWithError("cannot load the default policy's classifier");
    return;
  }
  const std::string text = Text(static_cast<int>(state.range(0) / 4)).substr(0, state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(policy->classifier->Predict(text));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(text.size()));
}
BENCHMARK(BM_LearnedClassifier)->Arg(64)->Arg(512)->Arg(4096);

// Everything the gateway does to decide a 4 KB request with the default policy: features
// (validation excluded), transparent rules, learned tier, rules and the explanation.
void BM_FullDecision4KB(benchmark::State& state) {
  const auto policy = DefaultPolicy(state);
  if (policy == nullptr) return;
  const tandem::router::PolicyRouter router(policy);
  const auto request = Request(1024);  // ~4 KB of text
  const bool trace = state.range(0) != 0;
  for (auto _ : state) {
    auto features = tandem::router::ExtractFeatures(request);
    benchmark::DoNotOptimize(router.Route(features, {}, trace));
  }
}
// 0: as serving decides; 1: with every rule explained (the Route RPC).
BENCHMARK(BM_FullDecision4KB)->Arg(0)->Arg(1);

// The prompt's size, estimated (every request) against counted by Qwen3's tokenizer (only
// requests near a threshold, with --tokenizer), for ~state.range(0) tokens of English.
template <bool kExact>
void BM_PromptSize(benchmark::State& state) {
  static auto counter = tandem::gateway::PromptTokenCounter::Load(
      tandem::testing::SourcePath("/tests/tokenizer/qwen3/tokenizer.json"), 0.5);
  if (!counter.ok()) {
    state.SkipWithError("cannot load tests/tokenizer/qwen3/tokenizer.json");
    return;
  }
  const auto request = Request(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    if (kExact) {
      benchmark::DoNotOptimize((*counter)->Count(request));
    } else {
      benchmark::DoNotOptimize(
          tandem::router::EstimateTokens(request.messages(0).content(0).text()));
    }
  }
  state.SetBytesProcessed(state.iterations() *
                          static_cast<int64_t>(request.messages(0).content(0).text().size()));
}
BENCHMARK(BM_PromptSize<false>)->Name("BM_PromptSize/estimate")->Arg(1024)->Arg(32768);
BENCHMARK(BM_PromptSize<true>)->Name("BM_PromptSize/tokenizer")->Arg(1024)->Arg(32768);

// Percentiles of single decisions: each repetition times one call, and the aggregates below are
// computed over the repetitions. The bounds (docs/performance.md) are on p99.
double Percentile(const std::vector<double>& v, double q) {
  std::vector<double> s = v;
  std::sort(s.begin(), s.end());
  return s[std::min(s.size() - 1, static_cast<size_t>(q * static_cast<double>(s.size())))];
}

template <bool kLearned>
void BM_DecisionLatency(benchmark::State& state) {
  const auto policy = DefaultPolicy(state);
  if (policy == nullptr) return;
  static const tandem::router::PolicyRouter router(policy);
  auto request = Request(1024);  // ~4 KB
  // learned: the full classification of the request (features, both tiers) and the rules.
  // rules_only: the decision alone, on features extracted beforehand, for a request a
  // transparent classify entry claims (a latency hint), so the learned tier is not consulted.
  if (!kLearned) request.mutable_hints()->set_objective(tandem::v1::OBJECTIVE_LATENCY);
  const auto precomputed = tandem::router::ExtractFeatures(request);
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    // As serving decides: only the deciding rule explained (the Route RPC traces every rule).
    if (kLearned) {
      auto features = tandem::router::ExtractFeatures(request);
      benchmark::DoNotOptimize(router.Route(features, {}, /*trace=*/false));
    } else {
      benchmark::DoNotOptimize(router.Route(precomputed, {}, /*trace=*/false));
    }
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
}
// One call a repetition, 3000 of them, reported as their p50 and p99.
void AsPercentiles(benchmark::internal::Benchmark* b) {
  b->UseManualTime()
      ->Iterations(1)
      ->Repetitions(3000)
      ->ReportAggregatesOnly(true)
      ->ComputeStatistics("p50", [](const std::vector<double>& v) { return Percentile(v, 0.50); })
      ->ComputeStatistics("p99", [](const std::vector<double>& v) { return Percentile(v, 0.99); })
      ->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_DecisionLatency<true>)->Name("BM_DecisionLatency4KB/learned")->Apply(AsPercentiles);
BENCHMARK(BM_DecisionLatency<false>)
    ->Name("BM_DecisionLatency4KB/rules_only")
    ->Apply(AsPercentiles);

void BM_StopMatcherPerToken(benchmark::State& state) {
  tandem::workers::StopMatcher m({"</answer>", "\n\nUser:"});
  bool stopped = false;
  for (auto _ : state) benchmark::DoNotOptimize(m.Push(" token", &stopped));
}
BENCHMARK(BM_StopMatcherPerToken);

}  // namespace

BENCHMARK_MAIN();
