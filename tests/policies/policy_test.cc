#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policies/policy_cases.h"
#include "policies/policy_loader.h"
#include "router/decision_record.h"
#include "router/hashed_classifier.h"
#include "router/policy_router.h"
#include "router/second_opinion.h"
#include "tests/support/policies.h"
#include "tests/support/temp_path.h"
#include "tests/support/test_paths.h"

namespace tandem::policies {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

std::shared_ptr<const router::Policy> MustParse(const std::string& yaml) {
  std::vector<PolicyError> errors;
  auto p = ParsePolicy(yaml, "test.yaml", &errors);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.value_or(nullptr);
}

std::vector<std::string> Errors(const std::string& yaml) {
  std::vector<PolicyError> errors;
  auto p = ParsePolicy(yaml, "bad.yaml", &errors);
  EXPECT_FALSE(p.ok());
  std::vector<std::string> out;
  for (const auto& e : errors) out.push_back(e.ToString());
  return out;
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  return tandem::testing::WriteTempFile(name, text);
}

constexpr char kHeader[] = R"(schema: 1
version: t1
models:
  qwen: {vision: true}
  nemotron: {}
classes: [accuracy_critical, latency_critical]
default_class: accuracy_critical
)";

TEST(PolicyLoaderTest, TheShippedDefaultPolicyIsValid) {
  std::vector<PolicyError> errors;
  auto p = LoadPolicyFile(tandem::testing::SourcePath("/policies/default.yaml"), &errors);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->version, "default-6");
  EXPECT_EQ((*p)->sha256.size(), 64u);
  EXPECT_TRUE((*p)->rules.back().when.MatchesEverything());
  EXPECT_EQ((*p)->triggers.size(), 2u);
}

TEST(PolicyLoaderTest, ReportsEveryErrorWithLineColumnAndPath) {
  const auto errors = Errors(std::string(kHeader) + R"(bogus: 1
rules:
  - name: a
    when: {prompt_tokens: {gt: many}, colour: red}
    action: {route: llama}
  - name: a
    action: {split: [{model: qwen, weight: 70}, {model: nemotron, weight: 20}]}
  - name: late
    action: {route: qwen}
)");
  EXPECT_THAT(
      errors,
      ElementsAre(
          "bad.yaml:8:1: bogus: unknown key; expected one of: classes, classifier, classify, "
          "default_class, models, rules, schema, signals, triggers, version",
          "bad.yaml:11:32: rules[0].when.prompt_tokens.gt: expected a finite number",
          HasSubstr("bad.yaml:11:39: rules[0].when.colour: unknown field"),
          "bad.yaml:12:21: rules[0].action.route: unknown model 'llama'",
          "bad.yaml:13:11: rules[1].name: duplicate name",
          "bad.yaml:14:21: rules[1].action.split: weights sum to 90, not 100",
          "bad.yaml:15:5: rules[2]: can never match: 'a' before it matches "
          "everything"));
}

TEST(PolicyLoaderTest, CatchesDuplicatesTypesAndReferences) {
  EXPECT_THAT(Errors("schema: 1\nversion: x\nversion: y\n"),
              ElementsAre(HasSubstr("3:1: version: duplicate key")));
  const auto errors = Errors(R"(schema: 2
version: x
models:
  qwen: {vision: maybe, max_context_tokens: 0, endpoints: [nohost], worker_pick: nearest}
classes: [a, a]
default_class: b
signals: {load: high}
classify:
  - {name: c1, class: z}
rules:
  - name: r
    when: {signal.undeclared: {gt: 1}, class: {in: [q]}, objective: fast}
    action: {route: qwen, shadow: qwen}
)");
  const std::string all = ::testing::PrintToString(errors);
  for (const char* want :
       {"schema: 2 is out of range [1, 1]",
        "models.qwen.vision: expected true or false", "max_context_tokens: 0 is out of range",
        "classes[1]: duplicate class", "default_class: unknown class 'b'",
        "signals.load: expected a finite number", "classify[0].class: unknown class 'z'",
        "signal 'undeclared' is not declared", "unknown class 'q'",
        "objective is one of auto, accuracy, latency",
        "shadows the model the rule already routes to",
        "models.qwen.endpoints[0]: expected HOST:PORT",
        "models.qwen.worker_pick: expected least_outstanding, power_of_two, round_robin or "
        "prefix"}) {
    EXPECT_THAT(all, HasSubstr(want));
  }
}

TEST(PolicyRouterTest, AModelsWorkerPickIsThePolicysOrEmpty) {
  const auto policy = MustParse(R"(schema: 1
version: v
models:
  qwen: {worker_pick: prefix}
  nemotron: {}
classes: [a]
default_class: a
rules:
  - {name: all, action: {route: qwen}}
)");
  const router::PolicyRouter router(policy);
  EXPECT_EQ(router.WorkerPick("qwen"), "prefix");
  EXPECT_EQ(router.WorkerPick("nemotron"), "") << "the gateway's --endpoint_pick";
  EXPECT_EQ(router.WorkerPick("unknown"), "");
}

TEST(PolicyLoaderTest, RequiresACatchAllLastRuleAndValidYaml) {
  EXPECT_THAT(::testing::PrintToString(Errors(std::string(kHeader) + R"(rules:
  - name: only_images
    when: {image_count: {gt: 0}}
    action: {route: qwen}
)")),
              HasSubstr("the last rule must have no `when`"));
  EXPECT_THAT(Errors("rules: [unclosed"), ElementsAre(HasSubstr("bad.yaml:1:")));
}

// The kHeader policy with `rules` (YAML list items), then a last rule 'rest' that routes to
// `rest_model`.
std::shared_ptr<const router::Policy> WithRest(const std::string& rules,
                                               const std::string& rest_model = "qwen") {
  return MustParse(absl::StrCat(kHeader, "rules:\n", rules,
                                "  - name: rest\n    action: {route: ", rest_model, "}\n"));
}

router::RequestFeatures Features() {
  router::RequestFeatures f;
  f.prompt_tokens = 100;
  return f;
}

TEST(PolicyRouterTest, DefaultPolicyMatchesTheSeedsRouting) {
  std::vector<PolicyError> errors;
  auto p = LoadPolicyFile(tandem::testing::SourcePath("/policies/default.yaml"), &errors);
  ASSERT_TRUE(p.ok());
  router::PolicyRouter r(*p);

  auto d = r.Route(Features());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->model, "qwen");
  EXPECT_EQ(d->rule, "accuracy");
  EXPECT_EQ(d->request_class, "accuracy_critical");
  EXPECT_EQ(d->policy_version, "default-6");
  EXPECT_THAT(d->fallback, ElementsAre("nemotron"));

  auto f = Features();
  f.objective = router::Objective::kLatency;
  EXPECT_EQ(r.Route(f)->model, "nemotron");
  EXPECT_EQ(r.Route(f)->request_class, "latency_critical");

  f = Features();
  f.prompt_tokens = 50000;
  EXPECT_EQ(r.Route(f)->rule, "long_context");

  f.image_count = 1;  // images win over long context: only qwen sees them
  EXPECT_EQ(r.Route(f)->model, "qwen");

  f.pinned_model = "nemotron";
  EXPECT_EQ(r.Route(f)->model, "nemotron");
  EXPECT_EQ(r.Route(f)->rule, "pinned");
  f.pinned_model = "gpt";
  EXPECT_EQ(r.Route(f).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PolicyRouterTest, ExplanationListsEveryRuleConsidered) {
  router::PolicyRouter r(WithRest(R"(  - name: big
    when: {prompt_tokens: {ge: 1000}, tenant: {in: [acme, initech]}}
    action: {route: nemotron}
)"));
  auto f = Features();
  f.tenant = "acme";
  auto d = r.Route(f);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->rule, "rest");
  ASSERT_EQ(d->trace.size(), 2u);
  EXPECT_FALSE(d->trace[0].matched);
  EXPECT_EQ(d->trace[0].detail,
            "prompt_tokens=100 (estimate) ge 1000: no; tenant='acme' in [acme, initech]: yes");
  f.prompt_tokens = 1000;
  EXPECT_EQ(r.Route(f)->model, "nemotron");
}

TEST(PolicyLoaderTest, ALabelCalledTenantIsRefusedInFavourOfTheAuthenticatedTenant) {
  const auto errors = Errors(std::string(kHeader) + R"(rules:
  - name: premium
    when: {label.tenant: {in: [enterprise]}}
    action: {route: qwen}
  - name: rest
    action: {route: nemotron}
)");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors[0], HasSubstr("rules[0].when.label.tenant"));
  EXPECT_THAT(errors[0], HasSubstr("test `tenant`"));
  // A label never sets `tenant`, whatever it says.
  router::PolicyRouter r(WithRest(R"(  - name: premium
    when: {tenant: enterprise}
    action: {route: qwen}
)",
                                  "nemotron"));
  auto f = Features();
  f.labels["tenant"] = "enterprise";
  EXPECT_EQ(r.Route(f)->rule, "rest");
  f.tenant = "enterprise";
  EXPECT_EQ(r.Route(f)->rule, "premium");
}

TEST(PolicyLoaderTest, ReasoningActionsAreParsedAndTheirMistakesReported) {
  auto p = MustParse(std::string(kHeader) + R"(signals: {q: 1}
rules:
  - name: chat
    when: {num_turns: {gt: 1}}
    action: {route: nemotron, reasoning: off}
  - name: rest
    action:
      route: qwen
      reasoning: {mode: on, budget: 4000, shrink: {signal: q, from: 1, to: 5, min: 500}}
)");
  EXPECT_TRUE(p->rules[0].action.reasoning.set);
  EXPECT_FALSE(p->rules[0].action.reasoning.on);
  const router::ReasoningAction& r = p->rules[1].action.reasoning;
  EXPECT_TRUE(r.set && r.on);
  EXPECT_EQ(r.budget_tokens, 4000);
  EXPECT_EQ(r.shrink_signal, "q");
  EXPECT_EQ(r.shrink_min_tokens, 500);
  const auto errors = Errors(std::string(kHeader) + R"(rules:
  - name: a
    when: {num_turns: 1}
    action: {route: qwen, reasoning: maybe}
  - name: b
    when: {num_turns: 2}
    action: {route: qwen, reasoning: {mode: off, budget: 10}}
  - name: c
    when: {num_turns: 3}
    action: {route: qwen, reasoning: {mode: on, budget: 10, shrink: {signal: nope, from: 5, to: 1, min: 20}}}
  - name: d
    when: {num_turns: 4}
    action: {shed: {}, reasoning: on}
  - name: rest
    action: {route: qwen}
)");
  const std::string all = ::testing::PrintToString(errors);
  for (const char* want : {"rules[0].action.reasoning: expected on or off",
                           "rules[1].action.reasoning: budget and shrink have no meaning",
                           "rules[2].action.reasoning.shrink.signal: signal 'nope' is not",
                           "rules[2].action.reasoning.shrink.to: must be above from",
                           "rules[2].action.reasoning.shrink.min: is above budget",
                           "rules[3].action.reasoning: has no meaning with shed"}) {
    EXPECT_THAT(all, HasSubstr(want));
  }
}

TEST(PolicyRouterTest, WeightedSplitIsStablePerKeyAndHonoursWeights) {
  auto p = MustParse(std::string(kHeader) + R"(rules:
  - name: canary
    action: {split: [{model: qwen, weight: 90}, {model: nemotron, weight: 10}]}
)");
  router::PolicyRouter r(p);
  int nemotron = 0;
  for (uint64_t key = 0; key < 1000; ++key) {
    auto f = Features();
    f.split_key = key * 2654435761u;
    const std::string m = r.Route(f)->model;
    EXPECT_EQ(r.Route(f)->model, m);  // stable for the same key
    nemotron += m == "nemotron";
  }
  EXPECT_NEAR(nemotron, 100, 30);
}

TEST(PolicyRouterTest, AnAlternativeHoldsOnlyWhenAllItsTestsDo) {
  router::PolicyRouter r(WithRest(R"(  - name: mid
    when: {any: [{prompt_tokens: {gt: 1000, lt: 4000}}, {label.app: {eq: x}, num_turns: {ge: 3}}]}
    action: {route: nemotron}
)"));
  auto f = Features();  // 100 tokens: neither alternative
  EXPECT_EQ(r.Route(f)->rule, "rest");
  f.prompt_tokens = 2000;
  EXPECT_EQ(r.Route(f)->rule, "mid");
  f.prompt_tokens = 5000;
  EXPECT_EQ(r.Route(f)->rule, "rest");
  f.labels["app"] = "x";  // half of the second alternative
  EXPECT_EQ(r.Route(f)->rule, "rest");
  f.num_turns = 3;
  EXPECT_EQ(r.Route(f)->rule, "mid");
  EXPECT_THAT(Errors(std::string(kHeader) + R"(rules:
  - {name: a, when: {any: [{}, {class: accuracy_critical}]}, action: {route: qwen}}
  - {name: b, action: {route: qwen}}
)"),
              ::testing::Contains(HasSubstr("rules[0].when.any[0]: empty alternative")));
  EXPECT_THAT(::testing::PrintToString(
                  Errors(std::string(kHeader) + R"(classifier: {model: m, min_confidence: .nan}
rules:
  - {name: b, action: {route: qwen}}
)")),
              HasSubstr("classifier.min_confidence: expected a finite number"));
}

// image_tokens: the images' share of the prompt, a condition of its own (a screenshot is
// thousands of tokens, a thumbnail a few dozen); decision records carry it for replay.
TEST(PolicyRouterTest, ImageTokensIsAConditionAndSurvivesTheDecisionRecord) {
  router::PolicyRouter r(WithRest(R"(  - name: big_images
    when: {image_tokens: {gt: 4000}}
    action: {route: nemotron}
)"));
  auto f = Features();
  f.image_count = 1;
  f.image_tokens = 770;
  EXPECT_EQ(r.Route(f)->rule, "rest");
  f.image_tokens = 8162;
  EXPECT_EQ(r.Route(f)->rule, "big_images");
  const router::RequestFeatures replayed =
      router::FeaturesFromRecord(router::ToRecord(f, *r.Route(f)));
  EXPECT_EQ(replayed.image_tokens, 8162);
  EXPECT_EQ(r.Route(replayed)->rule, "big_images");
}

// prefix_hit_tokens.MODEL: how much of the prompt a model's best worker is expected to hold in its
// prefix cache; absent (the gateway did not work it out) is no match. Decision records carry it.
TEST(PolicyRouterTest, PrefixHitTokensIsAConditionPerModelAndSurvivesTheDecisionRecord) {
  router::PolicyRouter r(WithRest(R"(  - name: stay_where_cached
    when: {prefix_hit_tokens.nemotron: {ge: 1024}}
    action: {route: nemotron}
)"));
  EXPECT_TRUE(r.ReadsPrefixHits());
  EXPECT_FALSE(router::PolicyRouter(WithRest("")).ReadsPrefixHits());
  auto f = Features();
  EXPECT_EQ(r.Route(f)->rule, "rest");
  f.prefix_hit_tokens = {{"qwen", 4096}, {"nemotron", 512}};
  EXPECT_EQ(r.Route(f)->rule, "rest");
  f.prefix_hit_tokens["nemotron"] = 2048;
  auto d = r.Route(f);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->rule, "stay_where_cached");
  EXPECT_THAT(d->reason, HasSubstr("2048"));
  const router::RequestFeatures replayed = router::FeaturesFromRecord(router::ToRecord(f, *d));
  EXPECT_EQ(replayed.prefix_hit_tokens, f.prefix_hit_tokens);
  EXPECT_EQ(r.Route(replayed)->rule, "stay_where_cached");
  EXPECT_THAT(::testing::PrintToString(Errors(std::string(kHeader) + R"(rules:
  - {name: r, when: {prefix_hit_tokens.mistral: {gt: 0}}, action: {route: qwen}}
  - {name: rest, action: {route: qwen}}
)")),
              HasSubstr("model 'mistral' is not declared in `models`"));
}

TEST(PolicyRouterTest, SignalsAndAnyConditions) {
  auto p = MustParse(std::string(kHeader) + R"(signals: {qwen_queue_depth: 40}
rules:
  - name: spill
    when:
      signal.qwen_queue_depth: {gt: 32}
      any: [{objective: latency}, {num_turns: {ge: 3}}]
    action: {route: nemotron, shadow: qwen}
  - name: rest
    action: {route: qwen}
)");
  router::PolicyRouter r(p);
  auto f = Features();
  EXPECT_EQ(r.Route(f)->rule, "rest");
  f.num_turns = 3;
  auto d = r.Route(f);
  EXPECT_EQ(d->rule, "spill");
  EXPECT_EQ(d->shadow, "qwen");
}

TEST(PolicyLoaderTest, ParsesLiveSignalsTriggersShedAndHedge) {
  auto p = MustParse(std::string(kHeader) + R"(signals:
  q:
    scrape: {model: nemotron, metric: tandem_worker_num_requests_waiting, labels: {a: b}, aggregate: max}
    stale: {after: 500ms, hold: 3s, then: fail_closed}
  p95:
    promql: 'histogram_quantile(0.95, sum by (le) (rate(x_bucket[1m])))'
    interval: 2s
  ttft:
    scrape: {model: nemotron, metric: ttft, aggregate: quantile, quantile: 0.9, window: 1m}
  g:
    gateway: {model: nemotron, metric: inflight, aggregate: avg}
  backlog:
    sum: [q, g]
triggers:
  busy: {signal: q, enter: {ge: 8}, exit: {le: 2}, min_dwell: 1.5}
rules:
  - name: shed
    when: {trigger.busy: on}
    action: {shed: {retry_after: 250ms}}
  - name: rest
    action: {route: nemotron, hedge: {after_signal: p95, after: 1s, min: 20ms, max: 3s}}
)");
  ASSERT_NE(p, nullptr);
  const auto& q = p->signals.at("q");
  EXPECT_EQ(q.source, router::SignalSource::kScrape);
  EXPECT_EQ(q.aggregate, router::Aggregate::kMax);
  EXPECT_EQ(q.labels.at("a"), "b");
  EXPECT_DOUBLE_EQ(q.stale_after_seconds, 0.5);
  EXPECT_DOUBLE_EQ(q.hold_seconds, 3);
  EXPECT_TRUE(q.fail_closed);
  EXPECT_EQ(p->signals.at("p95").source, router::SignalSource::kPromQL);
  const auto& g = p->signals.at("g");
  EXPECT_EQ(g.source, router::SignalSource::kGateway);
  EXPECT_EQ(g.model, "nemotron");
  EXPECT_EQ(g.gateway_metric, router::GatewayMetric::kInflight);
  EXPECT_EQ(g.aggregate, router::Aggregate::kAvg);
  EXPECT_EQ(p->signals.at("backlog").source, router::SignalSource::kSum);
  EXPECT_THAT(p->signals.at("backlog").terms, ElementsAre("q", "g"));
  EXPECT_DOUBLE_EQ(p->signals.at("p95").interval_seconds, 2);
  EXPECT_DOUBLE_EQ(p->signals.at("ttft").window_seconds, 60);
  EXPECT_DOUBLE_EQ(p->triggers.at("busy").min_dwell_seconds, 1.5);
  EXPECT_TRUE(p->rules[0].action.shed);
  EXPECT_DOUBLE_EQ(p->rules[0].action.retry_after_seconds, 0.25);

  router::PolicyRouter r(p);
  router::SignalSnapshot live;
  live.triggers["busy"] = true;
  auto shed = r.Route(Features(), live);
  ASSERT_TRUE(shed.ok());
  EXPECT_TRUE(shed->shed);
  EXPECT_EQ(shed->model, router::kShedModel);
  // Hedge delay: the signal's value clamped, or the fixed delay while the signal has none.
  live.triggers.clear();
  live.values["p95"] = 0.001;
  EXPECT_DOUBLE_EQ(r.Route(Features(), live)->hedge_after_seconds, 0.02);
  live.values["p95"] = 0.4;
  EXPECT_DOUBLE_EQ(r.Route(Features(), live)->hedge_after_seconds, 0.4);
  EXPECT_DOUBLE_EQ(r.Route(Features())->hedge_after_seconds, 1);
}

// Found twice by the policy fuzzer: yaml-cpp keeps both entries of a repeated key, so the loader
// parsed the second while node[name] found the first, and subscripting that threw. A repeated key
// is now an error of its own, at the repeat, before anything is parsed.
TEST(PolicyLoaderTest, ARepeatedKeyIsAnErrorAtTheRepeat) {
  for (const char* first : {"q: oops", "q: [1, 2]", "q: {sum: 3}", "q: {promql: up}"}) {
    const auto errors = Errors(absl::StrCat(kHeader, "signals:\n  ", first,
                                            "\n  q: {sum: [missing]}\nrules:\n"
                                            "  - name: rest\n    action: {route: qwen}\n"));
    EXPECT_THAT(errors, ElementsAre("bad.yaml:10:3: signals.q: duplicate key (first at line 9; "
                                    "YAML's keys are unique)"))
        << first;
  }
  EXPECT_THAT(Errors(std::string(kHeader) + "rules:\n  - name: a\n    name: b\n"),
              ElementsAre(HasSubstr("rules[0].name: duplicate key (first at line 9")));
}

TEST(PolicyLoaderTest, SignalAndTriggerMistakesAreReported) {
  const auto errors = Errors(std::string(kHeader) + R"(signals:
  both: {scrape: {model: qwen, metric: m}, promql: 'up'}
  fast: {promql: 'up', interval: 10ms}
  q: {scrape: {model: llama, metric: m, quantile: 0.5}}
  s: {scrape: {model: qwen, metric: m}, stale: {then: explode}}
  g: {gateway: {model: qwen, metric: backlog, aggregate: max}, interval: 1s}
  g2: {gateway: {model: llama, metric: queued}}
  total: {sum: [s, g, missing, nested]}
  nested: {sum: [s]}
  empty: {sum: []}
triggers:
  t1: {signal: nope, enter: {gt: 1}, exit: {lt: 0}}
  t2: {signal: q, enter: {gt: 5}, exit: {gt: 1}}
  t3: {signal: q, enter: {gt: 5}, exit: {lt: 9}}
rules:
  - name: r
    when: {trigger.t9: on, trigger.t2: maybe}
    action: {route: qwen, shed: {}, hedge: {min: 1s}}
  - name: rest
    action: {route: qwen}
)");
  const std::string all = absl::StrJoin(errors, "\n");
  for (const char* want :
       {"signals.both: expected a number, or exactly one of scrape, promql, "
        "gateway or sum",
        "signals.g.gateway.metric: expected queued or inflight",
        "signals.g.gateway.aggregate: expected sum (the total) or avg",
        "signals.g.interval: only PromQL signals have an interval",
        "signals.g2.gateway.model: unknown model 'llama'",
        "signals.total.sum[2]: signal 'missing' is not declared",
        "signals.total.sum[3]: signal 'nested' is a sum",
        "signals.empty.sum: expected a non-empty list of signal names",
        "signals.fast.interval: must be at least 100ms",
        "signals.q.scrape.model: unknown model 'llama'",
        "signals.q.scrape.quantile: only with aggregate: quantile",
        "signals.s.stale.then: expected fail_open or fail_closed",
        "triggers.t1.signal: signal 'nope' is not declared",
        "triggers.t2.exit: enter tests gt/ge, so exit must test lt/le",
        "triggers.t3.exit: the exit threshold 9 is above the enter threshold 5",
        "rules[0].when.trigger.t9: trigger 't9' is not declared",
        "rules[0].when.trigger.t2: a trigger is on or off",
        "exactly one of route, split, route_to_pinned, route_to_session or shed is required",
        "rules[0].action.hedge: has no meaning with shed",
        "rules[0].action.hedge: expected after (a duration) or after_signal"}) {
    EXPECT_THAT(all, HasSubstr(want));
  }
}

TEST(PolicyLoaderTest, TheClassifierModelIsPartOfThePolicyIdentity) {
  auto train = [](uint64_t seed) {
    router::HashedClassifier::TrainOptions o;
    o.buckets = 1 << 10;
    o.seed = seed;
    o.epochs = 1 + static_cast<int>(seed);
    return router::HashedClassifier::Train(
        {"accuracy_critical", "latency_critical"},
        {{"write code", 0}, {"hi there", 1}, {"prove it", 0}, {"thanks", 1}}, o);
  };
  const std::string model = tandem::testing::TempPath("model.tcls");
  const std::string yaml = std::string(kHeader) + "classifier: {model: " + model +
                           "}\nrules:\n  - {name: r, action: {route: qwen}}\n";
  std::ofstream(model) << train(1).ToBytes();
  auto a = MustParse(yaml);
  std::ofstream(model) << train(2).ToBytes();
  auto b = MustParse(yaml);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a->sha256, b->sha256);  // same YAML, retrained model: a different policy
  EXPECT_THAT(Errors(std::string(kHeader) + "classifier: {model: /nonexistent.tcls}\nrules:\n"
                                            "  - {name: r, action: {route: qwen}}\n"),
              ::testing::Contains(HasSubstr("classifier.model: cannot read /nonexistent.tcls")));
}

// classifier.second_opinion: below min_confidence the decision asks the named model and keeps
// the default class meanwhile; routed again with an answer, the answer's class decides; without
// one, the default class. Mistakes in the block are reported.
TEST(PolicyRouterTest, AnUnsureClassifierAsksForASecondOpinion) {
  router::HashedClassifier::TrainOptions o;
  o.buckets = 1 << 10;
  const std::string model = tandem::testing::TempPath("second_opinion.tcls");
  std::ofstream(model) << router::HashedClassifier::Train({"accuracy_critical", "latency_critical"},
                                                          {{"write code", 0}, {"hi there", 1}}, o)
                              .ToBytes();
  // min_confidence 1: the model is never sure enough.
  auto p =
      MustParse(std::string(kHeader) + "classifier: {model: " + model +
                ", min_confidence: 1, second_opinion: {model: nemotron, timeout: 150ms}}\n"
                "rules:\n"
                "  - {name: latency, when: {class: latency_critical}, action: {route: nemotron}}\n"
                "  - {name: rest, action: {route: qwen}}\n");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->second_opinion_model, "nemotron");
  EXPECT_DOUBLE_EQ(p->second_opinion_timeout_seconds, 0.15);
  router::PolicyRouter r(p);
  router::RequestFeatures f;
  f.classifier_text = "hi there";
  auto asks = r.Route(f, {}, true);
  ASSERT_TRUE(asks.ok());
  ASSERT_TRUE(asks->second_opinion.has_value());
  EXPECT_EQ(asks->second_opinion->model, "nemotron");
  EXPECT_DOUBLE_EQ(asks->second_opinion->timeout_seconds, 0.15);
  EXPECT_THAT(asks->second_opinion->classes, ElementsAre("accuracy_critical", "latency_critical"));
  EXPECT_EQ(asks->request_class, "accuracy_critical");  // what stands without an answer

  f.second_opinion_asked = true;
  f.second_opinion_class = "latency_critical";
  auto answered = r.Route(f, {}, true);
  ASSERT_TRUE(answered.ok());
  EXPECT_FALSE(answered->second_opinion.has_value());
  EXPECT_EQ(answered->request_class, "latency_critical");
  EXPECT_EQ(answered->model, "nemotron");
  EXPECT_THAT(answered->reason, HasSubstr("second opinion"));

  f.second_opinion_class.clear();
  auto unanswered = r.Route(f, {}, true);
  ASSERT_TRUE(unanswered.ok());
  EXPECT_FALSE(unanswered->second_opinion.has_value());
  EXPECT_EQ(unanswered->request_class, "accuracy_critical");
  EXPECT_EQ(unanswered->model, "qwen");

  // Survives the decision log: replay routes as the gateway did.
  f.second_opinion_class = "latency_critical";
  const router::RequestFeatures replayed =
      router::FeaturesFromRecord(router::ToRecord(f, *answered));
  EXPECT_TRUE(replayed.second_opinion_asked);
  EXPECT_EQ(replayed.second_opinion_class, "latency_critical");

  const std::string rules = "rules:\n  - {name: r, action: {route: qwen}}\n";
  EXPECT_THAT(Errors(std::string(kHeader) + "classifier: {model: " + model +
                     ", second_opinion: {model: gpt}}\n" + rules),
              Contains(HasSubstr("classifier.second_opinion.model: unknown model 'gpt'")));
  EXPECT_THAT(Errors(std::string(kHeader) + "classifier: {model: " + model +
                     ", second_opinion: {model: nemotron, timeout: 10s}}\n" + rules),
              Contains(HasSubstr("classifier.second_opinion.timeout: must be in (0, 5s]")));
  EXPECT_THAT(Errors(std::string(kHeader) + "classifier: {model: " + model +
                     ", second_opinion: {timeout: 1s}}\n" + rules),
              Contains(HasSubstr("classifier.second_opinion.model: required key is missing")));
}

// The question lists the classes by letter and carries the request's text, cut at a character
// boundary; the answer's letter or class name picks the class.
TEST(SecondOpinionTest, AsksByLetterAndReadsTheAnswer) {
  const std::vector<std::string> classes = {"accuracy_critical", "latency_critical"};
  const router::SecondOpinionQuestion q = router::SecondOpinionPrompt(classes, "hello there");
  EXPECT_THAT(q.system, HasSubstr("A: accuracy_critical"));
  EXPECT_THAT(q.system, HasSubstr("B: latency_critical"));
  EXPECT_THAT(q.user, HasSubstr("hello there"));
  const std::string long_text = std::string(router::kSecondOpinionTextBytes - 1, 'x') + "\xc3\xa9";
  EXPECT_THAT(router::SecondOpinionPrompt(classes, long_text).user,
              Not(HasSubstr("\xc3")));  // the cut character is left out whole
  EXPECT_EQ(router::SecondOpinionClass(classes, "A"), "accuracy_critical");
  EXPECT_EQ(router::SecondOpinionClass(classes, " b."), "latency_critical");
  EXPECT_EQ(router::SecondOpinionClass(classes, "Latency_critical"), "latency_critical");
  EXPECT_EQ(router::SecondOpinionClass(classes, "C"), "");
  EXPECT_EQ(router::SecondOpinionClass(classes, "Because"), "");
  EXPECT_EQ(router::SecondOpinionClass(classes, ""), "");
}

// A "billion laughs" policy, valid once expanded: an `in` list of `width` values, an alternative
// of `width` fields each testing that list, an `any` of `width` such alternatives, and `rules`
// rules sharing that `when` through aliases. The text grows as width + rules; the tree the
// loader walks as width^3 * rules.
std::string Laughs(int width, int rules) {
  return tandem::testing::AliasBombPolicy(kHeader, width, rules, "nemotron");
}

TEST(PolicyLimitsTest, NestedAliasesAreCountedAsTheTreeTheyStandFor) {
  constexpr char kNodeLimit[] =
      "more than 100000 YAML nodes, counting each alias as the nodes it names "
      "(--max_policy_yaml_nodes)";
  // 20^3 * 20 = 160,000 `in` values from 2 KB of YAML: over the default 100,000 nodes. Without
  // the limit this loads, as a policy 50 times the size of its file.
  const std::string modest = Laughs(20, 20);
  EXPECT_LT(modest.size(), 4000u);
  std::vector<PolicyError> errors;
  auto p = ParsePolicy(modest, "laughs.yaml", &errors);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors[0].ToString(), HasSubstr(kNodeLimit));

  // 1000^3 * 100 = 10^11 values from 31 KB: refused as soon as the count passes the limit, before
  // any tree is built or walked.
  const std::string laughs = Laughs(1000, 100);
  EXPECT_LT(laughs.size(), 32000u);
  errors.clear();
  p = ParsePolicy(laughs, "laughs.yaml", &errors);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors[0].ToString(), HasSubstr(kNodeLimit));
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("laughs.yaml:"));

  // The limit is the flag's: a small width loads, aliases and all, and a lower limit refuses it.
  auto small = MustParse(Laughs(2, 2));
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(small->rules.size(), 3u);
  ASSERT_EQ(small->rules[1].when.any.size(), 2u);
  EXPECT_EQ(small->rules[1].when.any[1].size(), 2u);
  PolicyLimits tight;
  tight.max_yaml_nodes = 40;
  errors.clear();
  EXPECT_FALSE(ParsePolicy(Laughs(2, 2), "laughs.yaml", &errors, tight).ok());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors[0].message, HasSubstr("more than 40 YAML nodes"));

  // An alias inside the node it names would be an endless tree.
  EXPECT_THAT(Errors(std::string(kHeader) +
                     "rules: &r\n  - {name: a, when: {any: *r}, action: {route: qwen}}\n"),
              ElementsAre(HasSubstr("an alias refers to a node that contains it")));
}

TEST(PolicyLimitsTest, DeepNestingIsRefusedWhereItGoesTooDeep) {
  // yaml-cpp's parser recurses once per level; 5,000 levels once failed only as "bad file".
  for (const std::string& deep :
       {std::string(5000, '[') + std::string(5000, ']'), std::string(100000, '[')}) {
    std::vector<PolicyError> errors;
    EXPECT_FALSE(
        ParsePolicy(std::string(kHeader) + "rules: " + deep + "\n", "deep.yaml", &errors).ok());
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_THAT(errors[0].message, HasSubstr("nested deeper than 64 levels"));
    EXPECT_EQ(errors[0].line, 8) << errors[0].ToString();  // the `rules:` line
  }
}

TEST(PolicyLimitsTest, RulesAndConditionsAreCapped) {
  auto rules = [](int n) {
    std::string yaml = std::string(kHeader) + "rules:\n";
    for (int i = 0; i < n - 1; ++i) {
      absl::StrAppend(&yaml, "  - {name: r", i, ", when: {prompt_tokens: {gt: ", i,
                      "}}, action: {route: qwen}}\n");
    }
    return yaml + "  - {name: rest, action: {route: nemotron}}\n";
  };
  auto at_limit = MustParse(rules(1000));
  ASSERT_NE(at_limit, nullptr);
  EXPECT_EQ(at_limit->rules.size(), 1000u);
  EXPECT_THAT(
      Errors(rules(1001)),
      ElementsAre("bad.yaml:9:3: rules: 1001 entries, more than 1000 (--max_policy_rules)"));

  // The classify list has the same cap.
  PolicyLimits limits;
  limits.max_rules = 1;
  std::vector<PolicyError> errors;
  EXPECT_FALSE(ParsePolicy(std::string(kHeader) + R"(classify:
  - {name: a, when: {objective: latency}, class: latency_critical}
  - {name: b, class: accuracy_critical}
rules:
  - {name: rest, action: {route: qwen}}
)",
                           "c.yaml", &errors, limits)
                   .ok());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].ToString(),
            "c.yaml:9:3: classify: 2 entries, more than 1 (--max_policy_rules)");

  // Conditions: each field, each operator of a field, and the fields of every alternative.
  auto when = [](int labels) {
    std::vector<std::string> fields;
    for (int i = 0; i < labels; ++i) fields.push_back(absl::StrCat("label.k", i, ": x"));
    const std::string alternative = absl::StrCat("{", absl::StrJoin(fields, ", "), "}");
    return std::string(kHeader) +
           "rules:\n  - name: many\n    when: {prompt_tokens: {gt: 1, lt: " + "9}, any: [" +
           alternative + ", " + alternative + "]}\n    action: {route: qwen}\n" +
           "  - {name: rest, action: {route: nemotron}}\n";
  };
  auto at_conditions = MustParse(when(31));  // 2 + 2 * 31 = 64
  ASSERT_NE(at_conditions, nullptr);
  EXPECT_EQ(at_conditions->rules[0].when.all.size(), 2u);
  EXPECT_THAT(Errors(when(32)),  // 66
              ElementsAre("bad.yaml:10:11: rules[0].when: 66 conditions, more than 64 "
                          "(--max_rule_conditions)"));
}

TEST(PolicyLimitsTest, FilesAreReadNoFurtherThanTheirLimit) {
  // A policy path that became a link to /dev/zero: refused at the limit, not read for ever.
  std::vector<PolicyError> errors;
  auto zero = LoadPolicyFile("/dev/zero", &errors);
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(zero.status().message(), "/dev/zero: larger than 4194304 bytes (--max_policy_bytes)");

  PolicyLimits limits;
  limits.max_file_bytes = 100;
  const std::string text = std::string(kHeader) + "rules:\n  - {name: r, action: {route: qwen}}\n";
  ASSERT_GT(text.size(), 100u);
  auto big = LoadPolicyFile(WriteTemp("big.yaml", text), &errors, limits);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(big.status().message()),
              HasSubstr("big.yaml: larger than 100 bytes (--max_policy_bytes)"));
  errors.clear();
  EXPECT_FALSE(ParsePolicy(text, "big.yaml", &errors, limits).ok());
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].ToString(),
            "big.yaml:1:1: (top): larger than 100 bytes (--max_policy_bytes)");

  // The classifier model the policy names is bounded too.
  EXPECT_THAT(Errors(std::string(kHeader) + "classifier: {model: /dev/zero}\nrules:\n"
                                            "  - {name: r, action: {route: qwen}}\n"),
              ElementsAre(HasSubstr("classifier.model: /dev/zero: larger than 67108864 bytes "
                                    "(--max_classifier_bytes)")));
}

TEST(PolicyLimitsTest, TheShippedPoliciesAreFarBelowTheDefaults) {
  // A tenth of every default still loads each shipped policy and its classifier.
  PolicyLimits tenth;
  tenth.max_file_bytes /= 10;
  tenth.max_yaml_nodes /= 10;
  tenth.max_rules /= 10;
  tenth.max_conditions /= 10;
  tenth.max_classifier_bytes /= 10;
  for (const char* name :
       {"default", "accuracy-first", "canary-latency-to-nemotron", "cost-saver"}) {
    std::vector<PolicyError> errors;
    auto p = LoadPolicyFile(absl::StrCat(tandem::testing::SourcePath("/policies/"), name, ".yaml"),
                            &errors, tenth);
    EXPECT_TRUE(p.ok()) << name << ": " << p.status();
  }
}

TEST(PolicyCasesTest, ReportsWrongExpectationsAndMalformedFiles) {
  auto p = MustParse(std::string(kHeader) + R"(rules:
  - name: latency
    when: {objective: latency}
    action: {route: nemotron}
  - name: rest
    action: {route: qwen}
)");
  auto results = RunPolicyCases(*p, WriteTemp("cases.yaml", R"(cases:
  - {name: right, request: {objective: latency}, expect: {model: nemotron, rule: latency}}
  - {name: wrong, request: {text: hi}, expect: {model: nemotron}}
  - {name: error expected, request: {model: llama}, expect: {error: INVALID_ARGUMENT}}
)"));
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(results->size(), 3u);
  EXPECT_TRUE((*results)[0].passed);
  EXPECT_FALSE((*results)[1].passed);
  EXPECT_THAT((*results)[1].detail, HasSubstr("model nemotron expected, got qwen"));
  EXPECT_FALSE((*results)[2].passed);  // this policy has no pin rule: qwen decides
  EXPECT_THAT((*results)[2].detail, HasSubstr("error INVALID_ARGUMENT expected, got OK"));

  auto bad = RunPolicyCases(*p, WriteTemp("bad_cases.yaml", R"(cases:
  - {name: x, request: {colour: red}, expect: {model: qwen}}
)"));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("bad_cases.yaml:2:25: cases[0].request.colour"));
  auto huge = RunPolicyCases(*p, WriteTemp("huge_cases.yaml", R"(cases:
  - {name: x, request: {turns: 0, images: 1, prompt_tokens: 1000000000000}, expect: {model: qwen}}
)"));
  EXPECT_THAT(std::string(huge.status().message()),
              HasSubstr("cases[0].request.turns: expected an integer in [1, 1000]"));
  EXPECT_THAT(std::string(huge.status().message()), HasSubstr("cases[0].request.prompt_tokens"));
}

}  // namespace
}  // namespace tandem::policies
