#include "policies/tenant_config.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/sha256.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/temp_path.h"

namespace tandem::policies {
namespace {

using ::testing::HasSubstr;

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
  for (const char* want :
       {"t.yaml:2:", "[a-z0-9_-]", "t.yaml:3:", "tandemctl hash-key",
        "t.yaml:6:", "unknown model 'llama'", "t.yaml:7:", "t.yaml:8:", "unknown key",
        "t.yaml:10:", "already belongs to another tenant", "t.yaml:11:"}) {
    EXPECT_THAT(m, HasSubstr(want));
  }
  auto reserved = policies::ParseTenantConfig(
      "tenants:\n  - name: other\n    keys: [" + Key("o") + "]\n  - name: e\n    keys: []\n",
      "t.yaml", {});
  ASSERT_FALSE(reserved.ok());
  for (const char* want :
       {"t.yaml:2:", "'other' is reserved", "t.yaml:5:", "no key could reach this tenant"}) {
    EXPECT_THAT(reserved.status().message(), HasSubstr(want));
  }
  auto repeated = policies::ParseTenantConfig(
      "tenants:\n  - name: r\n    keys: [" + Key("r") + "]\n    name: s\n", "t.yaml", {});
  ASSERT_FALSE(repeated.ok());
  EXPECT_THAT(repeated.status().message(),
              HasSubstr("t.yaml:4:5: tenants[0].name: duplicate key (first at line 2"));
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

}  // namespace
}  // namespace tandem::policies
