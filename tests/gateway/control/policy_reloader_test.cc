#include "gateway/control/policy_reloader.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gateway/intake/router_holder.h"
#include "gateway/metrics/gateway_metrics.h"
#include "gateway/pool/worker_pools.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "router/router.h"
#include "tests/support/temp_path.h"

namespace tandem::gateway {
namespace {

using tandem::testing::ReplaceFile;
using ::testing::HasSubstr;

std::string Policy(const std::string& version, const std::string& model) {
  return absl::StrCat("schema: 1\nversion: ", version, "\nmodels: {", model,
                      ": {}}\nclasses: [a]\ndefault_class: a\n"
                      "rules:\n  - {name: all, action: {route: ",
                      model, "}}\n");
}

std::string RoutedModel(const RouterHolder& holder) {
  auto decision = holder.Current()->Route(router::RequestFeatures{});
  return decision.ok() ? decision->model : std::string(decision.status().message());
}

class PolicyReloaderTest : public ::testing::Test {
 protected:
  PolicyReloaderTest() : pools_(WorkerPoolsOptions{}, [] {}) {
    EXPECT_TRUE(pools_.Configure({"qwen=127.0.0.1:1", "nemotron=127.0.0.1:2"}).ok());
    std::ofstream(path_) << Policy("v1", "qwen");
  }

  prometheus::Registry registry_;
  GatewayMetrics metrics_{registry_, {"qwen", "nemotron"}, {"a"}, "test"};
  WorkerPools pools_;
  RouterHolder holder_{nullptr};
  const std::string path_ = tandem::testing::TempPath("policy.yaml");
  PolicyReloader reloader_{path_, &pools_, &holder_, &metrics_};
};

TEST_F(PolicyReloaderTest, AValidFileGoesLiveWithItsVersionAndHash) {
  ASSERT_TRUE(reloader_.Reload("start").ok());
  EXPECT_EQ(reloader_.Live().first, "v1");
  EXPECT_EQ(reloader_.Live().second.size(), 64u);  // sha256, hex
  EXPECT_EQ(RoutedModel(holder_), "qwen");
  const std::string v1_hash = reloader_.Live().second;

  ReplaceFile(path_, Policy("v2", "nemotron"));
  ASSERT_TRUE(reloader_.Reload("SIGHUP").ok());
  EXPECT_EQ(reloader_.Live().first, "v2");
  EXPECT_NE(reloader_.Live().second, v1_hash);
  EXPECT_EQ(RoutedModel(holder_), "nemotron");
}

TEST_F(PolicyReloaderTest, AnInvalidFileIsRefusedAndTheLivePolicyStays) {
  ASSERT_TRUE(reloader_.Reload("start").ok());
  const auto live = holder_.Current();
  ReplaceFile(path_, "schema: 1\nversion: broken\nrules: [");
  const absl::Status s = reloader_.Reload("SIGHUP");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr(path_));
  EXPECT_EQ(reloader_.Live().first, "v1");
  EXPECT_EQ(holder_.Current(), live);
}

TEST_F(PolicyReloaderTest, APolicyRoutingToAModelWithoutWorkersIsRefused) {
  ASSERT_TRUE(reloader_.Reload("start").ok());
  ReplaceFile(path_, Policy("v2", "llama"));
  const absl::Status s = reloader_.Reload("admin");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("llama"));
  EXPECT_EQ(reloader_.Live().first, "v1");
}

TEST_F(PolicyReloaderTest, TheFileWatchReloadsOnlyWhenTheFileChanges) {
  ASSERT_TRUE(reloader_.Reload("start").ok());
  const auto live = holder_.Current();
  reloader_.CheckFile();
  EXPECT_EQ(holder_.Current(), live);  // unchanged: not reloaded
  ReplaceFile(path_, Policy("v2", "nemotron"));
  reloader_.CheckFile();
  EXPECT_EQ(reloader_.Live().first, "v2");
  EXPECT_NE(holder_.Current(), live);
}

}  // namespace
}  // namespace tandem::gateway
