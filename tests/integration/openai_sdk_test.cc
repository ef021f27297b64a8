// The OpenAI-compatible HTTP front against a real gateway and workers: the official `openai` npm
// SDK's test suite (tests/clients/openai_sdk.test.mjs), the examples docs/clients.md shows
// (examples/node/openai_chat.mjs, examples/curl/chat_stream.sh), and what a raw socket can
// send that a client library never does (malformed, oversized, pipelined requests).
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policies/tenant_config.h"
#include "tests/support/pki.h"
#include "tests/support/stack.h"
#include "tests/support/test_paths.h"

namespace tandem::testing {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kNodeModules = tandem::testing::SourcePath("/examples/node/node_modules");

class OpenAiSdkTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    suite_ = new TlsSuite();
    std::vector<TestCert> certs;
    ASSERT_NO_FATAL_FAILURE(MakeTestPki("openai", {"gateway"}, &suite_->ca, &certs));
    const TestCert* cert = &certs[0];
    auto workers = StartWorkers({"qwen", "nemotron"});
    ASSERT_TRUE(workers.ok()) << workers.status();
    suite_->workers = std::move(workers->servers);
    const std::vector<std::string> entries = workers->entries;
    const std::string tenants = WriteTempFile(
        "tenants.yaml",
        absl::StrCat("tenants:\n  - name: app\n    keys: [", policies::TenantKeyEntry("app-secret"),
                     "]\n  - name: tiny\n    keys: [", policies::TenantKeyEntry("tiny-secret"),
                     "]\n    limits: {requests_per_second: 0.01, burst_requests: 1}\n"));
    auto gateway = StartGateway(entries, {"--tls_cert=" + cert->cert, "--tls_key=" + cert->key,
                                          "--tenants=" + tenants, "--http_listen=127.0.0.1:0"});
    ASSERT_TRUE(gateway.ok()) << gateway.status();
    suite_->gateway = std::move(*gateway);
    ASSERT_FALSE(suite_->gateway.http_address.empty());
    ASSERT_TRUE(WaitForReadyModels(suite_->gateway.metrics_address, {"qwen", "nemotron"}));
  }
  static void TearDownTestSuite() {
    delete suite_;
    suite_ = nullptr;
  }

  static std::string BaseUrl() {
    return absl::StrCat("https://", suite_->gateway.http_address, "/v1");
  }

  // Runs `command` with the gateway's CA trusted by Node and the key in TANDEM_API_KEY.
  static std::pair<int, std::string> RunWithEnv(std::vector<std::string> command) {
    std::vector<std::string> args = {"NODE_EXTRA_CA_CERTS=" + suite_->ca.ca_cert(),
                                     "TANDEM_API_KEY=app-secret"};
    args.insert(args.end(), command.begin(), command.end());
    return RunToExit("/usr/bin/env", args, absl::Seconds(60));
  }

  static TlsSuite* suite_;
};

TlsSuite* OpenAiSdkTest::suite_ = nullptr;

TEST_F(OpenAiSdkTest, OfficialSdkSuite) {
  struct stat st;
  ASSERT_EQ(stat((kNodeModules + "/openai").c_str(), &st), 0)
      << "run scripts/setup.sh: it installs the examples' npm packages";
  const auto [code, out] =
      RunWithEnv({"TANDEM_NODE_MODULES=" + kNodeModules, "TANDEM_OPENAI_URL=" + BaseUrl(),
                  "TANDEM_LIMITED_KEY=tiny-secret",
                  "TANDEM_METRICS_URL=http://" + suite_->gateway.metrics_address, "/usr/bin/node",
                  "--test", tandem::testing::SourcePath("/tests/clients/openai_sdk.test.mjs")});
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("# fail 0")) << out;
}

TEST_F(OpenAiSdkTest, NodeExample) {
  const auto [code, out] =
      RunWithEnv({"/usr/bin/node", tandem::testing::SourcePath("/examples/node/openai_chat.mjs"),
                  BaseUrl(), "Hello there"});
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, ContainsRegex("^\\[(qwen|nemotron), rule [a-z_-]+\\] [^\n]+")) << out;
  EXPECT_THAT(out, ContainsRegex("\\([0-9]+ tokens\\)\n$")) << out;
}

TEST_F(OpenAiSdkTest, CurlExample) {
  const auto [code, out] = RunWithEnv({tandem::testing::SourcePath("/examples/curl/chat_stream.sh"),
                                       BaseUrl(), suite_->ca.ca_cert()});
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, StartsWith("data: {\"id\":\"chatcmpl-")) << out;
  EXPECT_THAT(out, HasSubstr("\"finish_reason\":\"length\"")) << out;
  EXPECT_THAT(out, HasSubstr("data: [DONE]\n\n")) << out;
}

// docs/clients.md shows the examples this test runs, verbatim.
TEST(OpenAiDocsTest, ClientsDocShowsTheExamplesCiRuns) {
  const std::string root = tandem::testing::SourceDir();
  auto doc = ReadFileToString(root + "/docs/clients.md");
  ASSERT_TRUE(doc.ok()) << doc.status();
  for (const char* example : {"/examples/node/openai_chat.mjs", "/examples/curl/chat_stream.sh"}) {
    auto text = ReadFileToString(root + example);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_THAT(*doc, HasSubstr(*text)) << example << " differs from its copy in docs/clients.md";
  }
}

}  // namespace
}  // namespace tandem::testing
