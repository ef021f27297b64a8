#include "gateway/intake/tenants.h"

#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gateway/grpc_front/grpc_front.h"
#include "gateway/metrics/gateway_metrics.h"
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
    metrics_.CountDecision("qwen", "c", "rule", version, "default");
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

std::string AdminsYaml(bool ops_admin, bool anonymous_admin = false) {
  return absl::StrCat("tenants:\n  - name: t\n    keys: [", Key("t-key"),
                      "]\n  - name: ops\n    keys: [", Key("ops-key"),
                      "]\n    admin: ", ops_admin ? "true" : "false", "\n",
                      anonymous_admin ? "  - name: anonymous\n    admin: true\n" : "");
}

TEST_F(TenantStateTest, AnonymousMayNeverBeAnAdmin) {
  TenantRegistryOptions options;
  options.allow_unauthenticated = true;
  TenantRegistry registry(options, &metrics_);
  const std::string path = tandem::testing::WriteTempFile("tenants.yaml", AdminsYaml(true, true));
  // At start-up: refused, naming the tenant and why.
  absl::Status s = registry.Load(path);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), path +
                             ": tenant 'anonymous' may not have admin: true (under "
                             "--allow_unauthenticated every caller without a key would be an "
                             "admin); give admin to a tenant with a key");
  EXPECT_FALSE(registry.enabled());

  // On reload: refused and counted, and the live tenants stay.
  tandem::testing::ReplaceFile(path, AdminsYaml(true));
  ASSERT_TRUE(registry.Load(path).ok());
  const std::string live_sha = registry.Describe().sha256;
  tandem::testing::ReplaceFile(path, AdminsYaml(true, true));
  s = registry.Reload("SIGHUP");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tenant 'anonymous' may not have admin: true"));
  registry.CheckFile();  // the watch reports the same refusal once, not again
  EXPECT_EQ(registry.Describe().sha256, live_sha);
  auto anon = registry.Authenticate("");
  ASSERT_TRUE(anon.ok());
  EXPECT_FALSE(anon->spec->admin);
}

TEST_F(TenantStateTest, AReloadThatLeavesNoAdminIsRefused) {
  TenantRegistry registry(TenantRegistryOptions{}, &metrics_);
  const std::string path = tandem::testing::WriteTempFile("tenants.yaml", AdminsYaml(true));
  ASSERT_TRUE(registry.Load(path).ok());
  const std::string live_sha = registry.Describe().sha256;

  tandem::testing::ReplaceFile(path, AdminsYaml(false));
  for (const char* trigger : {"admin RPC", "SIGHUP"}) {
    const absl::Status s = registry.Reload(trigger);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(s.message(), path +
                               ": no tenant has admin: true, so applying it would lock "
                               "tandem.v1.Admin (admins now: ops); the live tenants stay. Keep an "
                               "admin, or restart the gateway with this file to run without the "
                               "admin API");
  }
  registry.CheckFile();
  EXPECT_EQ(registry.Describe().sha256, live_sha);
  auto ops = registry.Authenticate("ops-key");
  ASSERT_TRUE(ops.ok());
  EXPECT_TRUE(ops->spec->admin);

  // Another admin in place of ops: applied.
  tandem::testing::ReplaceFile(path, AdminsYaml(false) + "  - name: root\n    keys: [" +
                                         Key("root-key") + "]\n    admin: true\n");
  ASSERT_TRUE(registry.Reload("admin RPC").ok());
  EXPECT_FALSE(registry.Authenticate("ops-key")->spec->admin);
  EXPECT_TRUE(registry.Authenticate("root-key")->spec->admin);
}

TEST_F(TenantStateTest, AGatewayStartedWithoutAdminsMayKeepRunningWithout) {
  TenantRegistry registry(TenantRegistryOptions{}, &metrics_);
  const std::string path = tandem::testing::WriteTempFile("tenants.yaml", AdminsYaml(false));
  ASSERT_TRUE(registry.Load(path).ok());
  tandem::testing::ReplaceFile(
      path, AdminsYaml(false) + "  - name: new\n    keys: [" + Key("new-key") + "]\n");
  ASSERT_TRUE(registry.Reload("SIGHUP").ok());
  EXPECT_TRUE(registry.Authenticate("new-key").ok());
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

}  // namespace
}  // namespace tandem::gateway
