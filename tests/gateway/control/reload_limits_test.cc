// Reloads of a policy or tenants file over its limits (--max_policy_bytes,
// --max_policy_yaml_nodes, --max_tenants_bytes, ...): refused, counted and logged, with the live
// version kept; the file watch neither hangs on /dev/zero nor keeps reporting the same file.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gateway/control/policy_reloader.h"
#include "gateway/intake/router_holder.h"
#include "gateway/intake/tenants.h"
#include "gateway/metrics/gateway_metrics.h"
#include "gateway/pool/worker_pools.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policies/policy_loader.h"
#include "policies/tenant_config.h"
#include "prometheus/registry.h"
#include "tests/support/policies.h"
#include "tests/support/temp_path.h"

namespace tandem::gateway {
namespace {

using tandem::testing::ReplaceFile;
using ::testing::HasSubstr;

// Makes `path` a symlink to /dev/zero, as in the red-team report.
void LinkToZero(const std::string& path) {
  const std::string tmp = path + ".link";
  ASSERT_EQ(symlink("/dev/zero", tmp.c_str()), 0);
  ASSERT_EQ(std::rename(tmp.c_str(), path.c_str()), 0);
}

// Points `path` at /dev/zero and expects `file`'s reload to refuse it with `message`, and its
// file watch to report it once however often it looks: `error_count()` from `errors` to
// `errors` + 2. `file` is a PolicyReloader or a TenantRegistry.
template <typename ReloadingFile>
void ExpectZeroLinkRefused(ReloadingFile* file, const std::string& path, const std::string& message,
                           const std::function<double()>& error_count, double errors) {
  ASSERT_NO_FATAL_FAILURE(LinkToZero(path));
  const absl::Status s = file->Reload("admin");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), message);
  EXPECT_EQ(error_count(), errors + 1);
  file->CheckFile();
  file->CheckFile();
  EXPECT_EQ(error_count(), errors + 2);
}

std::string Policy(const std::string& version) {
  return absl::StrCat("schema: 1\nversion: ", version,
                      "\nmodels: {qwen: {}}\nclasses: [a]\ndefault_class: a\n"
                      "rules:\n  - {name: all, action: {route: qwen}}\n");
}

// A policy whose one `when` is named by every rule through aliases: each rule holds
// `width` x `width` x `width` `in` values, so the tree is far larger than the file.
std::string Laughs(int width) {
  return testing::AliasBombPolicy(
      "schema: 1\nversion: laughs\nmodels: {qwen: {}}\nclasses: [a]\ndefault_class: a\n", width,
      width, "qwen");
}

// A counter's value by its `result` label; -1 when absent.
double Counted(prometheus::Registry& registry, const std::string& name, const std::string& result) {
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& m : family.metric) {
      for (const auto& l : m.label) {
        if (l.name == "result" && l.value == result) return m.counter.value;
      }
    }
  }
  return -1;
}

class ReloadLimitsTest : public ::testing::Test {
 protected:
  prometheus::Registry registry_;
  GatewayMetrics metrics_{registry_, {"qwen"}, {"a"}, "test"};
};

TEST_F(ReloadLimitsTest, APolicyOverItsLimitsIsRefusedAndTheLiveOneStays) {
  WorkerPools pools(WorkerPoolsOptions{}, [] {});
  ASSERT_TRUE(pools.Configure({"qwen=127.0.0.1:1"}).ok());
  RouterHolder holder(nullptr);
  const std::string path = tandem::testing::TempPath("policy.yaml");
  std::ofstream(path) << Policy("v1");
  PolicyReloader reloader(path, &pools, &holder, &metrics_, nullptr, policies::PolicyLimits());
  ASSERT_TRUE(reloader.Reload("start").ok());
  EXPECT_EQ(reloader.Live().first, "v1");
  const auto live_router = holder.Current();
  const auto error_count = [&] {
    return Counted(registry_, "tandem_policy_reloads_total", "error");
  };
  EXPECT_EQ(error_count(), 0);

  // Nested aliases: refused by the node count before any tree is walked.
  ReplaceFile(path, Laughs(1000));
  absl::Status s = reloader.Reload("SIGHUP");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("(--max_policy_yaml_nodes)"));
  EXPECT_EQ(reloader.Live().first, "v1");
  EXPECT_EQ(holder.Current(), live_router);
  EXPECT_EQ(error_count(), 1);
  // The file watch reports the same file once, not at every poll.
  reloader.CheckFile();
  reloader.CheckFile();
  EXPECT_EQ(error_count(), 2);

  // A link to /dev/zero: read no further than --max_policy_bytes, by the reload and the watch.
  ExpectZeroLinkRefused(&reloader, path, path + ": larger than 4194304 bytes (--max_policy_bytes)",
                        error_count, 2);
  EXPECT_EQ(reloader.Live().first, "v1");
  EXPECT_EQ(holder.Current(), live_router);

  // Restored: the watch picks the new file up (it was not left reading /dev/zero).
  ReplaceFile(path, Policy("v2"));
  reloader.CheckFile();
  EXPECT_EQ(reloader.Live().first, "v2");
  EXPECT_NE(holder.Current(), live_router);
  EXPECT_EQ(error_count(), 4);
  EXPECT_EQ(Counted(registry_, "tandem_policy_reloads_total", "ok"), 2);

  // The limits are the reloader's own: a lower rule cap refuses what the default takes.
  policies::PolicyLimits one_rule;
  one_rule.max_rules = 1;
  PolicyReloader strict(path, &pools, &holder, &metrics_, nullptr, one_rule);
  ReplaceFile(path, absl::StrCat(Policy("v3"), "  - {name: never, action: {route: qwen}}\n"));
  s = strict.Reload("start");
  EXPECT_THAT(s.message(), HasSubstr("rules: 2 entries, more than 1 (--max_policy_rules)"));
  EXPECT_EQ(reloader.Live().first, "v2");
}

TEST_F(ReloadLimitsTest, ATenantsFileOverItsLimitsIsRefusedAndTheLiveOneStays) {
  TenantRegistryOptions options;
  options.file_limits.max_tenants = 2;
  TenantRegistry registry(options, &metrics_);
  auto tenants = [](int n) {
    std::string yaml = "tenants:\n";
    for (int i = 0; i < n; ++i) {
      absl::StrAppend(&yaml, "  - {name: t", i, ", keys: [",
                      policies::TenantKeyEntry(absl::StrCat("key", i)), "]}\n");
    }
    return yaml;
  };
  const std::string path = tandem::testing::TempPath("tenants.yaml");
  std::ofstream(path) << tenants(1);
  ASSERT_TRUE(registry.Load(path).ok());
  const std::string live_sha = registry.Describe().sha256;
  const auto error_count = [&] {
    return Counted(registry_, "tandem_gateway_tenants_reloads_total", "error");
  };

  // Over --max_tenants: refused, the live tenants stay.
  ReplaceFile(path, tenants(3));
  absl::Status s = registry.Reload("SIGHUP");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tenants: 3 tenants, more than 2 (--max_tenants)"));
  EXPECT_EQ(error_count(), 1);
  EXPECT_EQ(registry.Describe().sha256, live_sha);
  EXPECT_TRUE(registry.Authenticate("key0").ok());
  EXPECT_FALSE(registry.Authenticate("key2").ok());

  // A link to /dev/zero: refused at --max_tenants_bytes, by the reload and (once) the watch.
  ExpectZeroLinkRefused(
      &registry, path, path + ": larger than 16777216 bytes (--max_tenants_bytes)", error_count, 1);
  EXPECT_EQ(registry.Describe().sha256, live_sha);
  EXPECT_TRUE(registry.Authenticate("key0").ok());

  // Restored: the watch applies the new file.
  ReplaceFile(path, tenants(2));
  registry.CheckFile();
  EXPECT_NE(registry.Describe().sha256, live_sha);
  EXPECT_TRUE(registry.Authenticate("key1").ok());
  EXPECT_EQ(error_count(), 3);
  EXPECT_EQ(Counted(registry_, "tandem_gateway_tenants_reloads_total", "ok"), 1);
}

}  // namespace
}  // namespace tandem::gateway
