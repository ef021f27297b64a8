// The client examples in examples/ (Python with Debian's python3-grpcio, Node with @grpc/grpc-js
// from npm, C++), run as a user runs them against a real gateway: TLS, an API key, unary and
// streaming, and a refusal that names its status.
#include <sys/stat.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policies/tenant_config.h"
#include "tests/support/pki.h"
#include "tests/support/stack.h"
#include "tests/support/test_paths.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

class ClientsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    suite_ = new TlsSuite();
    std::vector<TestCert> certs;
    ASSERT_NO_FATAL_FAILURE(
        MakeTestPki("clients", {"gateway", "worker", "gateway-client"}, &suite_->ca, &certs));
    const std::vector<std::string> worker_tls = {"--tls_cert=" + certs[1].cert,
                                                 "--tls_key=" + certs[1].key,
                                                 "--tls_client_ca=" + suite_->ca.ca_cert()};
    auto workers = StartWorkers({"qwen", "nemotron"}, worker_tls);
    ASSERT_TRUE(workers.ok()) << workers.status();
    suite_->workers = std::move(workers->servers);
    const std::vector<std::string> entries = workers->entries;
    const std::string tenants =
        WriteTempFile("tenants.yaml", absl::StrCat("tenants:\n  - name: app\n    keys: [",
                                                   policies::TenantKeyEntry("app-secret"), "]\n"));
    auto gateway = StartGateway(
        entries, {"--tls_cert=" + certs[0].cert, "--tls_key=" + certs[0].key,
                  "--worker_tls_ca=" + suite_->ca.ca_cert(), "--worker_tls_cert=" + certs[2].cert,
                  "--worker_tls_key=" + certs[2].key, "--tenants=" + tenants});
    ASSERT_TRUE(gateway.ok()) << gateway.status();
    suite_->gateway = std::move(*gateway);
    // Health over plaintext would be refused: wait for the gateway's "ready" view through a
    // client instead, below, by retrying nothing: the examples run once models are ready.
    ASSERT_TRUE(WaitForReadyModels(suite_->gateway.metrics_address, {"qwen", "nemotron"}));
  }
  static void TearDownTestSuite() {
    delete suite_;
    suite_ = nullptr;
  }

  // Runs an example: `command` is the program and its own leading arguments; the connection
  // flags follow.
  static std::pair<int, std::string> Run(std::vector<std::string> command, const std::string& key,
                                         bool stream, const std::string& prompt = "Hello there") {
    command.push_back("--address=" + suite_->gateway.grpc_address);
    command.push_back("--ca=" + suite_->ca.ca_cert());
    command.push_back("--api_key=" + key);
    command.push_back("--max_tokens=8");
    if (stream) command.push_back("--stream");
    command.push_back(prompt);
    const std::string binary = command.front();
    command.erase(command.begin());
    return RunToExit(binary, command);
  }

  static void ExpectServedAndRefused(const std::vector<std::string>& command) {
    for (bool stream : {false, true}) {
      const auto [code, out] = Run(command, "app-secret", stream);
      EXPECT_EQ(code, 0) << out;
      // The route on stderr, then text on stdout.
      EXPECT_THAT(out, MatchesRegex("(.|\n)*\\[(qwen|nemotron): [^]]+\\](.|\n)*")) << out;
      const auto [bad_code, bad_out] = Run(command, "wrong-secret", stream);
      EXPECT_EQ(bad_code, 1) << bad_out;
      EXPECT_THAT(bad_out, HasSubstr("UNAUTHENTICATED")) << bad_out;
    }
  }

  static TlsSuite* suite_;
};

TlsSuite* ClientsTest::suite_ = nullptr;

TEST_F(ClientsTest, Python) {
  // The message classes, generated as the example's instructions say.
  const std::string gen = TempPath("pygen");
  ASSERT_EQ(mkdir(gen.c_str(), 0700), 0);
  const std::string proto = tandem::testing::SourcePath("/proto");
  std::vector<std::string> protoc_args = {"-I", proto, "--python_out=" + gen};
  for (const char* f : {"chat", "common", "gateway"}) {
    protoc_args.push_back(absl::StrCat(proto, "/tandem/v1/", f, ".proto"));
  }
  const auto [protoc_code, protoc_out] = RunToExit(TANDEM_PROTOC, protoc_args);
  ASSERT_EQ(protoc_code, 0) << protoc_out;
  ExpectServedAndRefused({"/usr/bin/env", "PYTHONPATH=" + gen, "/usr/bin/python3",
                          tandem::testing::SourcePath("/examples/python/tandem_client.py")});
}

TEST_F(ClientsTest, Node) {
  const std::string example = tandem::testing::SourcePath("/examples/node");
  struct stat st;
  ASSERT_EQ(stat((example + "/node_modules/@grpc/grpc-js").c_str(), &st), 0)
      << "run scripts/setup.sh: it installs the example's npm packages";
  ExpectServedAndRefused({"/usr/bin/node", example + "/tandem_client.js"});
}

TEST_F(ClientsTest, Cpp) { ExpectServedAndRefused({TANDEM_CLIENT_EXAMPLE_BIN}); }

}  // namespace
}  // namespace tandem::testing
