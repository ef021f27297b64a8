// Tenants: the tenants file, token buckets, per-tenant admission and fair queueing.
#include "gateway/tenants.h"

#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/sha256.h"
#include "gateway/fair_queue.h"
#include "gateway/gateway_metrics.h"
#include "gateway/gateway_service.h"
#include "gateway/token_bucket.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policies/tenant_config.h"
#include "prometheus/registry.h"
#include "tests/support/temp_path.h"

namespace tandem::gateway {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string Key(const std::string& secret) { return policies::TenantKeyEntry(secret); }

TEST(TenantConfigTest, ParsesAFullFile) {
  const std::string yaml =
      "tenants:\n"
      "  - name: search\n"
      "    keys: [" +
      Key("a") + ", " + Key("b") +
      "]\n"
      "    models: [qwen]\n"
      "    priority: 4\n"
      "    admin: true\n"
      "    limits: {requests_per_second: 5, burst_requests: 10,\n"
      "             tokens_per_second: 100, burst_tokens: 200,\n"
      "             max_concurrency: 3}\n"
      "  - name: anonymous\n";
  auto c = policies::ParseTenantConfig(yaml, "t.yaml", {"qwen", "nemotron"});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ((*c)->tenants.size(), 2u);
  const policies::TenantSpec& t = (*c)->tenants[0];
  EXPECT_EQ(t.name, "search");
  EXPECT_EQ(t.priority, 4);
  EXPECT_TRUE(t.admin);
  EXPECT_EQ(t.models, std::set<std::string>{"qwen"});
  EXPECT_EQ(t.limits.max_concurrency, 3);
  EXPECT_EQ(t.limits.burst_tokens, 200);
  EXPECT_EQ((*c)->by_key.at(Sha256Hex("b")), 0u);
  ASSERT_NE((*c)->Anonymous(), nullptr);
}

TEST(TenantConfigTest, EveryMistakeIsReportedWithItsLine) {
  const std::string yaml =
      "tenants:\n"
      "  - name: Search\n"      // 2: bad name
      "    keys: [plainkey]\n"  // 3: not a hash
      "  - name: b\n"
      "    keys: [" +
      Key("x") +
      "]\n"
      "    models: [llama]\n"                  // 6: unknown model
      "    priority: 0\n"                      // 7: out of range
      "    limits: {requests_per_secnd: 1}\n"  // 8: typo
      "  - name: c\n"
      "    keys: [" +
      Key("x") +
      "]\n"             // 10: key reused
      "  - name: d\n";  // 11: no keys
  auto c = policies::ParseTenantConfig(yaml, "t.yaml", {"qwen", "nemotron"});
  ASSERT_FALSE(c.ok());
  const std::string m(c.status().message());
  EXPECT_THAT(m, HasSubstr("t.yaml:2:"));
  EXPECT_THAT(m, HasSubstr("[a-z0-9_-]"));
  EXPECT_THAT(m, HasSubstr("t.yaml:3:"));
  EXPECT_THAT(m, HasSubstr("tandemctl hash-key"));
  EXPECT_THAT(m, HasSubstr("t.yaml:6:"));
  EXPECT_THAT(m, HasSubstr("unknown model 'llama'"));
  EXPECT_THAT(m, HasSubstr("t.yaml:7:"));
  EXPECT_THAT(m, HasSubstr("t.yaml:8:"));
  EXPECT_THAT(m, HasSubstr("unknown key"));
  EXPECT_THAT(m, HasSubstr("t.yaml:10:"));
  EXPECT_THAT(m, HasSubstr("already belongs to another tenant"));
  EXPECT_THAT(m, HasSubstr("t.yaml:11:"));
  auto reserved = policies::ParseTenantConfig(
      "tenants:\n  - name: other\n    keys: [" + Key("o") + "]\n  - name: e\n    keys: []\n",
      "t.yaml", {});
  ASSERT_FALSE(reserved.ok());
  EXPECT_THAT(reserved.status().message(), HasSubstr("t.yaml:2:"));
  EXPECT_THAT(reserved.status().message(), HasSubstr("'other' is reserved"));
  EXPECT_THAT(reserved.status().message(), HasSubstr("t.yaml:5:"));
  EXPECT_THAT(reserved.status().message(), HasSubstr("no key could reach this tenant"));
  EXPECT_FALSE(policies::ParseTenantConfig("tenants: [", "t.yaml", {}).ok());
  EXPECT_FALSE(policies::ParseTenantConfig("tenants: []", "t.yaml", {}).ok());
}

TEST(TenantConfigTest, TheFileIsBoundedInBytesNodesAndTenants) {
  auto tenants = [](int n) {
    std::string yaml = "tenants:\n";
    for (int i = 0; i < n; ++i) {
      absl::StrAppend(&yaml, "  - {name: t", i, ", keys: [", Key(absl::StrCat(i)), "]}\n");
    }
    return yaml;
  };
  policies::TenantsFileLimits limits;
  limits.max_tenants = 3;
  EXPECT_TRUE(policies::ParseTenantConfig(tenants(3), "t.yaml", {}, limits).ok());
  auto over = policies::ParseTenantConfig(tenants(4), "t.yaml", {}, limits);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(over.status().message(), "t.yaml:2:3: tenants: 4 tenants, more than 3 (--max_tenants)");

  // Aliases count as the nodes they name: a list of aliases to one big tenant is refused.
  std::vector<std::string> models(100, "qwen");
  std::string laughs = "tenants:\n  - &t {name: a, keys: [" + Key("a") + "], models: [" +
                       absl::StrJoin(models, ", ") + "]}\n";
  for (int i = 0; i < 20000; ++i) laughs += "  - *t\n";
  auto aliased = policies::ParseTenantConfig(laughs, "t.yaml", {});
  EXPECT_EQ(aliased.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(aliased.status().message(),
              HasSubstr("more than 1000000 YAML nodes, counting each alias as the nodes it names "
                        "(--max_tenants_yaml_nodes)"));

  limits = policies::TenantsFileLimits();
  limits.max_file_bytes = 64;
  const std::string path = tandem::testing::WriteTempFile("tenants.yaml", tenants(2));
  auto big = policies::LoadTenantFile(path, {}, limits);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(big.status().message(), path + ": larger than 64 bytes (--max_tenants_bytes)");
  auto zero = policies::LoadTenantFile("/dev/zero", {});
  EXPECT_EQ(zero.status().message(), "/dev/zero: larger than 16777216 bytes (--max_tenants_bytes)");
}

TEST(TokenBucketTest, RefillsAtItsRateUpToItsBurst) {
  const auto t0 = Clock::now();
  TokenBucket b;
  b.Configure(/*rate=*/10, /*burst=*/5, t0);
  EXPECT_EQ(b.WaitFor(5, t0), 0);
  b.Take(5);
  EXPECT_NEAR(b.WaitFor(1, t0), 0.1, 1e-9);
  EXPECT_EQ(b.WaitFor(1, t0 + milliseconds(100)), 0);
  // Never more than the burst, however long it was idle.
  EXPECT_NEAR(b.WaitFor(5, t0 + std::chrono::hours(1)), 0, 1e-9);
  EXPECT_NEAR(b.level(), 5, 1e-9);
  // Debt: a large request runs, and the next waits until it is repaid.
  b.Take(25);
  EXPECT_NEAR(b.WaitFor(0, t0 + std::chrono::hours(1)), 2.0, 1e-6);
  TokenBucket unlimited;
  unlimited.Configure(0, 0, t0);
  unlimited.Take(1e9);
  EXPECT_EQ(unlimited.WaitFor(1, t0), 0);
}

class TenantStateTest : public ::testing::Test {
 protected:
  prometheus::Registry registry_;
  GatewayMetrics metrics_{registry_, {"qwen"}, {"c"}, "test"};
};

TEST_F(TenantStateTest, EnforcesConcurrencyRequestsAndTokens) {
  const auto t0 = Clock::now();
  auto spec = std::make_shared<policies::TenantSpec>();
  spec->name = "t";
  spec->limits.max_concurrency = 2;
  spec->limits.requests_per_second = 1;
  spec->limits.burst_requests = 3;
  spec->limits.tokens_per_second = 100;
  spec->limits.burst_tokens = 100;
  TenantState s("t", metrics_.ForTenant("t", 8));
  s.SetSpec(spec, t0);
  EXPECT_FALSE(s.TryAdmit(60, t0).has_value());
  // Tokens: 40 left, so the second still runs (the bucket is not in debt)...
  EXPECT_FALSE(s.TryAdmit(60, t0).has_value());
  // ...concurrency is the limit now.
  auto r = s.TryAdmit(1, t0);
  ASSERT_TRUE(r.has_value());
  EXPECT_STREQ(r->reason, "concurrency");
  // Both end having used 10 of their 60: 100 tokens back, the bucket is full again.
  s.Release(50);
  s.Release(50);
  EXPECT_EQ(s.inflight(), 0);
  EXPECT_FALSE(s.TryAdmit(1, t0).has_value());
  s.Release(0);
  // Three requests in the same instant took the burst of three.
  r = s.TryAdmit(1, t0);
  ASSERT_TRUE(r.has_value());
  EXPECT_STREQ(r->reason, "requests");
  EXPECT_NEAR(r->retry_after_seconds, 1.0, 1e-6);
  EXPECT_THAT(r->message, HasSubstr("over 1 requests/s"));
  // A second later one more is allowed; tokens in debt refuse the next.
  EXPECT_FALSE(s.TryAdmit(500, t0 + std::chrono::seconds(1)).has_value());
  s.Release(0);
  r = s.TryAdmit(1, t0 + std::chrono::seconds(2));
  ASSERT_TRUE(r.has_value());
  EXPECT_STREQ(r->reason, "tokens");
}

TEST_F(TenantStateTest, TenantLabelsAreBounded) {
  EXPECT_EQ(metrics_.ForTenant("a", 2).label, "a");
  EXPECT_EQ(metrics_.ForTenant("b", 2).label, "b");
  EXPECT_EQ(metrics_.ForTenant("c", 2).label, "other");
  EXPECT_EQ(metrics_.ForTenant("d", 2).label, "other");
  EXPECT_EQ(metrics_.ForTenant("a", 2).label, "a");
}

TEST_F(TenantStateTest, DecisionSeriesOfOldPolicyVersionsGo) {
  const auto decision_series = [&](const std::string& version) {
    int n = 0;
    for (const auto& family : registry_.Collect()) {
      if (family.name != "tandem_gateway_route_decisions_total") continue;
      for (const auto& m : family.metric) {
        for (const auto& l : m.label) n += l.name == "policy_version" && l.value == version;
      }
    }
    return n;
  };
  for (int v = 1; v <= 5; ++v) {
    const std::string version = "v" + std::to_string(v);
    metrics_.SetLivePolicy(version, "sha");
    metrics_.CountDecision("qwen", "c", "rule", version);
  }
  EXPECT_EQ(decision_series("v1"), 0);
  EXPECT_EQ(decision_series("v2"), 0);
  EXPECT_EQ(decision_series("v3"), 1);
  EXPECT_EQ(decision_series("v5"), 1);
}

TEST_F(TenantStateTest, RegistryAuthenticatesByKeyHash) {
  TenantRegistryOptions options;
  TenantRegistry registry(options, &metrics_);
  EXPECT_FALSE(registry.enabled());
  EXPECT_EQ(registry.Authenticate("").status().code(), absl::StatusCode::kUnauthenticated);
  auto config = policies::ParseTenantConfig(
      "tenants:\n  - name: t\n    keys: [" + Key("secret") + "]\n", "t.yaml", {});
  ASSERT_TRUE(config.ok());
  registry.Apply(*config);
  EXPECT_TRUE(registry.enabled());
  auto caller = registry.Authenticate("secret");
  ASSERT_TRUE(caller.ok());
  EXPECT_EQ(caller->spec->name, "t");
  EXPECT_EQ(registry.Authenticate("Secret").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(registry.Authenticate("").status().code(), absl::StatusCode::kUnauthenticated);
  // A reload keeps the tenant's state (same object, so no fresh burst).
  auto before = caller->tenant;
  registry.Apply(*config);
  EXPECT_EQ(registry.Authenticate("secret")->tenant, before);

  options.allow_unauthenticated = true;
  TenantRegistry open(options, &metrics_);
  auto anon = open.Authenticate("");
  ASSERT_TRUE(anon.ok());
  EXPECT_EQ(anon->spec->name, "anonymous");
  // Without a tenants file there are no keys to check: a client that sends one is anonymous too.
  auto keyed = open.Authenticate("some-key");
  ASSERT_TRUE(keyed.ok()) << keyed.status();
  EXPECT_EQ(keyed->spec->name, "anonymous");
  EXPECT_EQ(keyed->tenant, anon->tenant);
}

TEST_F(TenantStateTest, DescribeListsTheLiveTenantsWithAnonymousOnce) {
  auto names = [](const TenantRegistry::Live& live) {
    std::vector<std::string> out;
    for (const auto& t : live.tenants) out.push_back(t.spec->name);
    return out;
  };
  auto parse = [](const std::string& yaml) {
    auto config = policies::ParseTenantConfig(yaml, "t.yaml", {});
    EXPECT_TRUE(config.ok()) << config.status();
    return *config;
  };
  const std::string one = "tenants:\n  - name: t\n    keys: [" + Key("a") + ", " + Key("b") + "]\n";
  const std::string with_anonymous =
      one + "  - name: anonymous\n    limits: {requests_per_second: 1}\n";

  TenantRegistryOptions closed;
  TenantRegistry registry(closed, &metrics_);
  EXPECT_TRUE(registry.Describe().tenants.empty());
  registry.Apply(parse(one));
  TenantRegistry::Live live = registry.Describe();
  EXPECT_EQ(names(live), std::vector<std::string>{"t"});
  EXPECT_FALSE(live.allow_unauthenticated);
  EXPECT_EQ(live.tenants[0].keys, 2);
  auto caller = registry.Authenticate("a");
  ASSERT_TRUE(caller.ok());
  ASSERT_FALSE(caller->tenant->TryAdmit(10, Clock::now()).has_value());
  EXPECT_EQ(registry.Describe().tenants[0].inflight, 1);
  caller->tenant->Release(0);
  EXPECT_EQ(registry.Describe().tenants[0].inflight, 0);
  // Without --allow_unauthenticated a file's 'anonymous' is an ordinary entry.
  registry.Apply(parse(with_anonymous));
  EXPECT_EQ(names(registry.Describe()), (std::vector<std::string>{"t", "anonymous"}));

  TenantRegistryOptions open;
  open.allow_unauthenticated = true;
  TenantRegistry keyless(open, &metrics_);
  live = keyless.Describe();
  EXPECT_EQ(names(live), std::vector<std::string>{"anonymous"});  // no file: unlimited
  EXPECT_TRUE(live.allow_unauthenticated);
  EXPECT_EQ(live.tenants[0].spec->limits.requests_per_second, 0);
  keyless.Apply(parse(one));
  EXPECT_EQ(names(keyless.Describe()), (std::vector<std::string>{"t", "anonymous"}));
  keyless.Apply(parse(with_anonymous));
  live = keyless.Describe();
  EXPECT_EQ(names(live), (std::vector<std::string>{"t", "anonymous"}));  // listed once
  EXPECT_EQ(live.tenants[1].spec->limits.requests_per_second, 1);
}

TEST(ApiKeyTest, BearerOrXApiKey) {
  std::multimap<grpc::string_ref, grpc::string_ref> md;
  EXPECT_EQ(ApiKeyFromMetadata(md), "");
  md.emplace("x-api-key", "k1");
  EXPECT_EQ(ApiKeyFromMetadata(md), "k1");
  md.emplace("authorization", "Bearer k2");
  EXPECT_EQ(ApiKeyFromMetadata(md), "k2");
  std::multimap<grpc::string_ref, grpc::string_ref> basic;
  basic.emplace("authorization", "Basic abc");
  // Not a bearer token: a wrong key, never "no key".
  EXPECT_EQ(ApiKeyFromMetadata(basic), "Basic abc");
}

// Grants in order, recording which tenant each went to.
class FairQueueTest : public ::testing::Test {
 protected:
  void Enqueue(FairQueue& q, const std::string& tenant, int priority, int n) {
    for (int i = 0; i < n; ++i) {
      auto w = std::make_unique<FairQueue::Waiter>();
      w->tenant = tenant;
      w->grant = [this, tenant] { granted_.push_back(tenant); };
      ASSERT_EQ(q.Acquire(w.get(), priority), FairQueue::Result::kQueued);
      waiters_.push_back(std::move(w));
    }
  }
  std::vector<std::string> granted_;
  std::vector<std::unique_ptr<FairQueue::Waiter>> waiters_;
};

TEST_F(FairQueueTest, RunsAtOnceUnderTheLimitAndQueuesAboveIt) {
  FairQueue q({/*max_inflight=*/2, /*max_queued_per_tenant=*/2});
  FairQueue::Waiter a{nullptr, "a"}, b{nullptr, "a"}, c{nullptr, "a"};
  EXPECT_EQ(q.Acquire(&a, 1), FairQueue::Result::kRun);
  EXPECT_EQ(q.Acquire(&b, 1), FairQueue::Result::kRun);
  Enqueue(q, "a", 1, 2);
  EXPECT_EQ(q.Acquire(&c, 1), FairQueue::Result::kFull);
  EXPECT_EQ(q.queued(), 2);
  // A cancelled waiter is never granted.
  EXPECT_TRUE(q.Cancel(waiters_[0].get()));
  EXPECT_FALSE(q.Cancel(waiters_[0].get()));
  q.Release();
  EXPECT_EQ(granted_.size(), 1u);
  EXPECT_EQ(q.inflight(), 2);
  q.Release();
  q.Release();
  EXPECT_EQ(q.inflight(), 0);
  EXPECT_EQ(q.queued(), 0);
  // No limit: nothing ever waits.
  FairQueue unlimited({0, 0});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(unlimited.Acquire(&a, 1), FairQueue::Result::kRun);
}

TEST_F(FairQueueTest, ALateTenantIsNotStuckBehindAFloodersBacklog) {
  FairQueue q({1, 1000});
  FairQueue::Waiter running{nullptr, "flood"};
  ASSERT_EQ(q.Acquire(&running, 1), FairQueue::Result::kRun);
  Enqueue(q, "flood", 1, 50);
  for (int i = 0; i < 5; ++i) q.Release();  // five of the flood's run
  Enqueue(q, "late", 1, 3);
  for (int i = 0; i < 6; ++i) q.Release();
  // From the moment it arrived, the late tenant alternates with the flooder.
  const std::vector<std::string> after(granted_.begin() + 5, granted_.begin() + 11);
  EXPECT_EQ(std::count(after.begin(), after.end(), "late"), 3) << ::testing::PrintToString(after);
}

TEST_F(FairQueueTest, CapacityFollowsTheWorkersAndMoreRoomGrantsWaiters) {
  FairQueue q({1024, 1000});
  q.SetCapacity(2);  // the model's workers take two at once
  FairQueue::Waiter a{nullptr, "flood"}, b{nullptr, "flood"};
  ASSERT_EQ(q.Acquire(&a, 1), FairQueue::Result::kRun);
  ASSERT_EQ(q.Acquire(&b, 1), FairQueue::Result::kRun);
  Enqueue(q, "flood", 1, 10);
  Enqueue(q, "late", 1, 1);
  EXPECT_TRUE(granted_.empty());
  // A worker joins: its room goes to the waiters at once, the late tenant among the first.
  q.SetCapacity(4);
  ASSERT_EQ(granted_.size(), 2u);
  EXPECT_EQ(std::count(granted_.begin(), granted_.end(), "late"), 1)
      << ::testing::PrintToString(granted_);
  EXPECT_EQ(q.inflight(), 4);
  // A worker leaves: nothing is taken back, but no slot is given until inflight is below it.
  q.SetCapacity(1);
  for (int i = 0; i < 3; ++i) q.Release();
  EXPECT_EQ(granted_.size(), 2u);
  q.Release();
  EXPECT_EQ(granted_.size(), 3u);
  EXPECT_EQ(q.capacity(), 1);
}

TEST_F(FairQueueTest, PriorityIsAShareOfTheSlots) {
  FairQueue q({1, 1000});
  FairQueue::Waiter running{nullptr, "x"};
  ASSERT_EQ(q.Acquire(&running, 1), FairQueue::Result::kRun);
  Enqueue(q, "gold", 3, 100);
  Enqueue(q, "bronze", 1, 100);
  for (int i = 0; i < 40; ++i) q.Release();
  const int gold = static_cast<int>(std::count(granted_.begin(), granted_.end(), "gold"));
  EXPECT_EQ(gold, 30) << ::testing::PrintToString(granted_);
  // Neither starves.
  EXPECT_EQ(40 - gold, 10);
}

}  // namespace
}  // namespace tandem::gateway
