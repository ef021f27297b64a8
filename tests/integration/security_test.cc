// Transport security and tenants, end to end: real tandem-worker and tandem-gateway processes on
// loopback with TLS, mutual TLS and API keys; certificates made by openssl per test.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/file.h"
#include "common/http_client.h"
#include "common/tls.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "policies/tenant_config.h"
#include "tandem/v1/admin.grpc.pb.h"
#include "tandem/v1/gateway.grpc.pb.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "tests/support/pki.h"
#include "tests/support/policies.h"
#include "tests/support/requests.h"
#include "tests/support/stack.h"
#include "tests/support/test_paths.h"

namespace tandem::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

std::shared_ptr<grpc::ChannelCredentials> TlsTo(const std::string& ca,
                                                const TestCert* client = nullptr) {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = *ReadFileToString(ca);
  if (client != nullptr) {
    o.pem_private_key = *ReadFileToString(client->key);
    o.pem_cert_chain = *ReadFileToString(client->cert);
  }
  return grpc::SslCredentials(o);
}

// A fresh channel each time: a new connection, so a new TLS handshake.
grpc::Status Generate(const std::string& address, std::shared_ptr<grpc::ChannelCredentials> creds,
                      const std::string& api_key = "",
                      tandem::v1::GenerateRequest req = Prompt("hello", 4),
                      std::multimap<std::string, std::string>* trailers = nullptr) {
  grpc::ChannelArguments args;
  // Each call its own connection (no reuse of a subchannel across test channels).
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto stub = tandem::v1::Gateway::NewStub(grpc::CreateCustomChannel(address, creds, args));
  grpc::ClientContext ctx;
  Deadline(&ctx, std::chrono::seconds(20));
  if (!api_key.empty()) ctx.AddMetadata("authorization", "Bearer " + api_key);
  tandem::v1::GenerateResponse resp;
  grpc::Status s = stub->Generate(&ctx, req, &resp);
  if (trailers != nullptr) {
    for (const auto& [k, v] : ctx.GetServerTrailingMetadata()) {
      trailers->emplace(std::string(k.data(), k.size()), std::string(v.data(), v.size()));
    }
  }
  return s;
}

bool EventuallyOk(const std::function<grpc::Status()>& call) {
  return WaitUntil([&] { return call().ok(); }, absl::Seconds(30));
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<TestCert> certs, rogue;
    ASSERT_NO_FATAL_FAILURE(
        MakeTestPki("main", {"gateway", "worker", "gateway-client"}, &ca_, &certs));
    ASSERT_NO_FATAL_FAILURE(MakeTestPki("other", {"rogue"}, &other_ca_, &rogue));
    gateway_cert_ = certs[0];
    worker_cert_ = certs[1];
    gateway_client_ = certs[2];
    rogue_ = rogue[0];
  }

  std::vector<std::string> WorkerTls() const {
    return {"--tls_cert=" + worker_cert_.cert, "--tls_key=" + worker_cert_.key,
            "--tls_client_ca=" + ca_.ca_cert()};
  }
  std::vector<std::string> GatewayTls() const {
    return {"--tls_cert=" + gateway_cert_.cert,        "--tls_key=" + gateway_cert_.key,
            "--worker_tls_ca=" + ca_.ca_cert(),        "--worker_tls_cert=" + gateway_client_.cert,
            "--worker_tls_key=" + gateway_client_.key, "--tls_refresh_interval=1s"};
  }

  TestCa ca_;
  TestCa other_ca_;
  TestCert gateway_cert_, worker_cert_, gateway_client_, rogue_;
};

TEST_F(TlsTest, MutualTlsEndToEndAndPlaintextPeersAreRefused) {
  auto qwen = StartWorker("qwen", WorkerTls());
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  auto nemotron = StartWorker("nemotron", WorkerTls());
  ASSERT_TRUE(nemotron.ok()) << nemotron.status();
  auto gateway = StartGateway({"qwen=" + qwen->grpc_address, "nemotron=" + nemotron->grpc_address},
                              GatewayTls());
  ASSERT_TRUE(gateway.ok()) << gateway.status();

  // The gateway reaches its workers over mutual TLS and serves a TLS client.
  EXPECT_TRUE(EventuallyOk([&] { return Generate(gateway->grpc_address, TlsTo(ca_.ca_cert())); }));
  const std::string log = gateway->process->ReadLog();
  EXPECT_THAT(log, HasSubstr("transport=tls workers_transport=mtls"));
  EXPECT_THAT(log, Not(HasSubstr("PLAINTEXT")));

  // A plaintext client cannot talk to the TLS port.
  grpc::Status plain = Generate(gateway->grpc_address, grpc::InsecureChannelCredentials());
  EXPECT_EQ(plain.error_code(), grpc::StatusCode::UNAVAILABLE) << plain.error_message();
  // A client that trusts another CA refuses the gateway's certificate.
  grpc::Status wrong_ca = Generate(gateway->grpc_address, TlsTo(other_ca_.ca_cert()));
  EXPECT_EQ(wrong_ca.error_code(), grpc::StatusCode::UNAVAILABLE);

  // Workers take only clients with a certificate from their CA.
  for (const TestCert* client : std::vector<const TestCert*>{nullptr, &rogue_}) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto stub = tandem::v1::Worker::NewStub(
        grpc::CreateCustomChannel(qwen->grpc_address, TlsTo(ca_.ca_cert(), client), args));
    grpc::ClientContext ctx;
    Deadline(&ctx, std::chrono::seconds(10));
    tandem::v1::WorkerInfo info;
    grpc::Status s = stub->GetInfo(&ctx, {}, &info);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE)
        << (client == nullptr ? "no client certificate" : "certificate from another CA");
  }
  // ...and the gateway's own client certificate works directly too.
  {
    auto stub = tandem::v1::Worker::NewStub(
        grpc::CreateChannel(qwen->grpc_address, TlsTo(ca_.ca_cert(), &gateway_client_)));
    grpc::ClientContext ctx;
    Deadline(&ctx, std::chrono::seconds(10));
    tandem::v1::WorkerInfo info;
    EXPECT_TRUE(stub->GetInfo(&ctx, {}, &info).ok());
  }
}

TEST_F(TlsTest, AGatewayWithAClientCaRequiresClientCertificates) {
  auto qwen = StartWorker("qwen", WorkerTls());
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  auto nemotron = StartWorker("nemotron", WorkerTls());
  ASSERT_TRUE(nemotron.ok()) << nemotron.status();
  std::vector<std::string> args = GatewayTls();
  args.push_back("--tls_client_ca=" + ca_.ca_cert());
  auto gateway =
      StartGateway({"qwen=" + qwen->grpc_address, "nemotron=" + nemotron->grpc_address}, args);
  ASSERT_TRUE(gateway.ok()) << gateway.status();
  EXPECT_THAT(gateway->process->ReadLog(), HasSubstr("transport=mtls workers_transport=mtls"));
  // A certificate the client CA signed is served...
  EXPECT_TRUE(EventuallyOk(
      [&] { return Generate(gateway->grpc_address, TlsTo(ca_.ca_cert(), &gateway_client_)); }));
  // ...none, or one from another CA, is refused in the handshake.
  for (const TestCert* client : std::vector<const TestCert*>{nullptr, &rogue_}) {
    grpc::ChannelArguments channel_args;
    channel_args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto stub = tandem::v1::Gateway::NewStub(grpc::CreateCustomChannel(
        gateway->grpc_address, TlsTo(ca_.ca_cert(), client), channel_args));
    grpc::ClientContext ctx;
    Deadline(&ctx, std::chrono::seconds(10));
    tandem::v1::ListModelsResponse models;
    EXPECT_EQ(stub->ListModels(&ctx, {}, &models).error_code(), grpc::StatusCode::UNAVAILABLE)
        << (client == nullptr ? "no client certificate" : "certificate from another CA");
  }
}

TEST_F(TlsTest, RotatedCertificatesApplyWithoutRestart) {
  auto qwen = StartWorker("qwen", WorkerTls());
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  // The gateway serves from copies of the files, which the test then rotates.
  const std::string cert = TempPath("served.crt");
  const std::string key = TempPath("served.key");
  ASSERT_TRUE(ReplaceFileAtomically(gateway_cert_.cert, cert).ok());
  ASSERT_TRUE(ReplaceFileAtomically(gateway_cert_.key, key).ok());
  std::vector<std::string> args = GatewayTls();
  args[0] = "--tls_cert=" + cert;
  args[1] = "--tls_key=" + key;
  args.push_back("--default_model=qwen");
  args.push_back("--accuracy_model=qwen");
  args.push_back("--latency_model=qwen");
  args.push_back("--vision_model=qwen");
  args.push_back("--long_context_model=qwen");
  auto gateway = StartGateway({"qwen=" + qwen->grpc_address}, args);
  ASSERT_TRUE(gateway.ok()) << gateway.status();
  ASSERT_TRUE(EventuallyOk([&] { return Generate(gateway->grpc_address, TlsTo(ca_.ca_cert())); }));

  // Rotate to a certificate from another CA (key first: the watcher checks they match).
  auto next = other_ca_.Issue("gateway-next");
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_TRUE(ReplaceFileAtomically(next->key, key).ok());
  ASSERT_TRUE(ReplaceFileAtomically(next->cert, cert).ok());
  // New connections get the new certificate once the gateway re-reads the files.
  EXPECT_TRUE(
      EventuallyOk([&] { return Generate(gateway->grpc_address, TlsTo(other_ca_.ca_cert())); }));
  EXPECT_EQ(Generate(gateway->grpc_address, TlsTo(ca_.ca_cert())).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

// GET https://ADDRESS/metrics trusting `ca`, showing `client` when given.
absl::StatusOr<std::string> GetMetricsOverTls(const std::string& address, const std::string& ca,
                                              const TestCert* client = nullptr) {
  TlsFiles tls;
  tls.ca = ca;
  if (client != nullptr) {
    tls.cert = client->cert;
    tls.key = client->key;
  }
  return CurlHttpClient(tls).Get(absl::StrCat("https://", address, "/metrics"), absl::Seconds(10));
}

TEST_F(TlsTest, MetricsOverTlsAreScrapedWithTheGatewaysClientCertificate) {
  if (!HavePrometheus()) GTEST_SKIP() << "prometheus was not found at configure time";
  std::vector<std::string> worker_args = WorkerTls();
  worker_args.push_back("--metrics_tls");
  auto qwen = StartWorker("qwen", worker_args);
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  auto nemotron = StartWorker("nemotron", worker_args);
  ASSERT_TRUE(nemotron.ok()) << nemotron.status();
  std::vector<std::string> gateway_args = GatewayTls();
  gateway_args.push_back("--metrics_tls");
  auto gateway = StartGateway({"qwen=" + qwen->grpc_address, "nemotron=" + nemotron->grpc_address},
                              gateway_args);
  ASSERT_TRUE(gateway.ok()) << gateway.status();
  EXPECT_THAT(qwen->process->ReadLog(), HasSubstr("metrics_transport=mtls"));
  EXPECT_THAT(gateway->process->ReadLog(), HasSubstr("metrics_transport=tls"));

  // The worker's /metrics takes only clients with a certificate from its client CA...
  EXPECT_FALSE(HttpGet(qwen->metrics_address, "/metrics").ok());
  EXPECT_FALSE(GetMetricsOverTls(qwen->metrics_address, ca_.ca_cert()).ok());
  EXPECT_FALSE(GetMetricsOverTls(qwen->metrics_address, ca_.ca_cert(), &rogue_).ok());
  auto direct = GetMetricsOverTls(qwen->metrics_address, ca_.ca_cert(), &gateway_client_);
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_THAT(*direct, HasSubstr("tandem_worker_num_requests_running"));

  // ...such as the gateway's: its scrapes of both workers succeed (and none fails), read from
  // the gateway's own /metrics, which is HTTPS without client certificates.
  EXPECT_FALSE(HttpGet(gateway->metrics_address, "/metrics").ok());
  auto scrapes = [&](const std::string& model, const std::string& result) {
    auto text = GetMetricsOverTls(gateway->metrics_address, ca_.ca_cert());
    if (!text.ok()) return -1.0;
    return MetricValue(*text, "tandem_gateway_worker_scrapes_total",
                       {{"model_name", model}, {"result", result}})
        .value_or(-1.0);
  };
  EXPECT_TRUE(
      WaitUntil([&] { return scrapes("qwen", "ok") >= 3 && scrapes("nemotron", "ok") >= 3; }));
  EXPECT_EQ(scrapes("qwen", "error"), 0);
  EXPECT_EQ(scrapes("nemotron", "error"), 0);

  // A real Prometheus server scrapes the worker the same way: up only with a client certificate.
  const std::string tls_config =
      absl::StrCat("tls_config: {ca_file: '", ca_.ca_cert(), "', cert_file: '",
                   gateway_client_.cert, "', key_file: '", gateway_client_.key, "'}");
  auto prometheus =
      StartPrometheus({qwen->metrics_address}, "200ms", {"scheme: https", tls_config});
  ASSERT_TRUE(prometheus.ok()) << prometheus.status();
  auto up = [&] {
    auto text = HttpGet(prometheus->grpc_address, "/api/v1/query?query=up");
    return text.ok() ? *text : std::string();
  };
  EXPECT_TRUE(WaitUntil([&] { return absl::StrContains(up(), "\"1\"]"); })) << up();
}

TEST_F(TlsTest, TransportMistakesAreStartupErrors) {
  struct Case {
    const char* binary;
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {tandem::testing::GatewayBin(),
       {"--workers=qwen=127.0.0.1:1", "--worker_plaintext", "--allow_unauthenticated"},
       "needs --tls_cert and --tls_key (TLS), or an explicit --plaintext"},
      {tandem::testing::GatewayBin(),
       {"--workers=qwen=127.0.0.1:1", "--plaintext", "--allow_unauthenticated"},
       "give --worker_tls_ca, --worker_tls_cert and --worker_tls_key, or an explicit "
       "--worker_plaintext"},
      {tandem::testing::GatewayBin(),
       {"--workers=qwen=127.0.0.1:1", "--plaintext", "--worker_plaintext"},
       "give --tenants=FILE"},
      {tandem::testing::GatewayBin(),
       {"--workers=qwen=127.0.0.1:1", "--tls_cert=" + gateway_cert_.cert,
        "--tls_key=" + worker_cert_.key, "--worker_plaintext", "--allow_unauthenticated"},
       "does not belong to the certificate"},
      {tandem::testing::GatewayBin(),
       {"--workers=qwen=127.0.0.1:1", "--tls_cert=/nonexistent.pem", "--tls_key=/nonexistent.key",
        "--worker_plaintext", "--allow_unauthenticated"},
       "cannot read /nonexistent.pem"},
      {tandem::testing::GatewayBin(),
       {"--workers=qwen=127.0.0.1:1", "--plaintext", "--tls_cert=" + gateway_cert_.cert,
        "--worker_plaintext", "--allow_unauthenticated"},
       "contradict each other"},
      {tandem::testing::WorkerBin(),
       {"--model=qwen", "--engine=synthetic", "--device=cpu", "--tls_cert=" + worker_cert_.cert,
        "--tls_key=" + worker_cert_.key},
       "--tls_client_ca is required"},
      {tandem::testing::WorkerBin(),
       {"--model=qwen", "--engine=synthetic", "--device=cpu"},
       "or an explicit --plaintext"},
      {tandem::testing::WorkerBin(),
       {"--model=qwen", "--engine=synthetic", "--device=cpu", "--plaintext", "--metrics_tls"},
       "it cannot be combined with --plaintext"},
      {tandem::testing::WorkerBin(),
       {"--model=qwen", "--engine=synthetic", "--device=cpu", "--plaintext",
        "--metrics_request_timeout=0s"},
       "--metrics_request_timeout must be between 100ms and 10m"},
      {tandem::testing::WorkerBin(),
       {"--model=qwen", "--engine=synthetic", "--device=cpu", "--plaintext",
        "--metrics_idle_timeout=100ms"},
       "--metrics_idle_timeout must be between 1s and 24h"},
      {tandem::testing::GatewayBin(),
       {"--workers=qwen=127.0.0.1:1", "--plaintext", "--worker_plaintext",
        "--allow_unauthenticated", "--metrics_max_connections=0"},
       "--metrics_max_connections must be in [1, 10000]"},
  };
  for (const Case& c : cases) {
    auto [code, log] = RunToExit(c.binary, c.args);
    EXPECT_EQ(code, 2) << log;
    EXPECT_THAT(log, HasSubstr(c.message));
  }
}

TEST(PlaintextTest, ChosenPlaintextIsSaidLoudly) {
  auto worker = StartWorker("qwen");
  ASSERT_TRUE(worker.ok()) << worker.status();
  auto gateway = StartGateway({"qwen=" + worker->grpc_address, "nemotron=" + worker->grpc_address});
  ASSERT_TRUE(gateway.ok()) << gateway.status();
  EXPECT_THAT(worker->process->ReadLog(),
              HasSubstr("PLAINTEXT: tandem-worker serves gRPC without TLS"));
  const std::string log = gateway->process->ReadLog();
  EXPECT_THAT(log, HasSubstr("PLAINTEXT: tandem-gateway serves gRPC without TLS"));
  EXPECT_THAT(log, HasSubstr("PLAINTEXT: the gateway calls workers without TLS"));
  EXPECT_THAT(log, HasSubstr("UNAUTHENTICATED: no --tenants file"));
}

// Tenants over plaintext (transport is covered above).
class TenantsTest : public ::testing::Test {
 protected:
  static std::string Key(const std::string& secret) { return policies::TenantKeyEntry(secret); }

  std::string TenantsYaml(const std::string& extra_search_key = "") const {
    std::string search_keys = Key("search-secret");
    if (!extra_search_key.empty()) absl::StrAppend(&search_keys, ", ", Key(extra_search_key));
    return absl::StrCat(
        "tenants:\n"
        "  - name: search\n"
        "    keys: [",
        search_keys,
        "]\n"
        "    limits: {requests_per_second: 0.2, burst_requests: 2}\n"
        "  - name: batch\n"
        "    keys: [",
        Key("batch-secret"),
        "]\n"
        "    models: [nemotron]\n"
        "    limits: {max_thinking_tokens: 256}\n"
        "  - name: ops\n"
        "    keys: [",
        Key("ops-secret"),
        "]\n"
        "    admin: true\n");
  }

  void Start(const std::vector<std::string>& extra = {},
             const std::vector<std::string>& nemotron_flags = {}) {
    auto qwen = StartWorker("qwen");
    ASSERT_TRUE(qwen.ok()) << qwen.status();
    auto nemotron = StartWorker("nemotron", nemotron_flags);
    ASSERT_TRUE(nemotron.ok()) << nemotron.status();
    tenants_path_ = WriteTempFile("tenants.yaml", TenantsYaml());
    std::vector<std::string> args = {"--tenants=" + tenants_path_, "--policy_watch_interval=100ms"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto gateway = StartServingGateway(
        {"qwen=" + qwen->grpc_address, "nemotron=" + nemotron->grpc_address}, args);
    ASSERT_TRUE(gateway.ok()) << gateway.status();
    qwen_ = std::move(*qwen);
    nemotron_ = std::move(*nemotron);
    gateway_ = std::move(*gateway);
  }

  // `req` to the gateway's Generate (Response = GenerateResponse) or Route (RouteResponse) on a
  // new channel within `deadline`, as the tenant of `key`: "authorization: Bearer KEY", or
  // "x-api-key: KEY" when `x_api_key`.
  template <typename Response>
  grpc::Status As(const std::string& key, const tandem::v1::GenerateRequest& req, Response* out,
                  bool x_api_key = false,
                  std::chrono::milliseconds deadline = std::chrono::seconds(10)) {
    auto stub = tandem::v1::Gateway::NewStub(
        grpc::CreateChannel(gateway_.grpc_address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    Deadline(&ctx, deadline);
    if (x_api_key) {
      ctx.AddMetadata("x-api-key", key);
    } else {
      ctx.AddMetadata("authorization", "Bearer " + key);
    }
    if constexpr (std::is_same_v<Response, tandem::v1::RouteResponse>) {
      return stub->Route(&ctx, req, out);
    } else {
      return stub->Generate(&ctx, req, out);
    }
  }

  // "tell me a long story about WHO" (24 tokens) to nemotron as the tenant of `key`; when it ends,
  // WHO (or WHO:CODE when refused) is added to finished_.
  void Story(const std::string& who, const std::string& key) {
    tandem::v1::GenerateRequest req = Prompt("tell me a long story about " + who, 24);
    req.mutable_hints()->set_model("nemotron");
    grpc::Status s = Call(key, req);
    absl::MutexLock l(&finished_mu_);
    finished_.push_back(s.ok() ? who : who + ":" + std::to_string(s.error_code()));
  }

  // batch's story on a thread of its own, returned once its request waits in the gateway's queue.
  std::thread BatchJoinsTheQueue() {
    std::thread other([this] { Story("batch", "batch-secret"); });
    EXPECT_EQ(WaitForMetric(gateway_.metrics_address, "tandem_gateway_tenant_queued_requests",
                            {{"tenant", "batch"}}, 1)
                  .status(),
              absl::OkStatus());
    return other;
  }
  // Joins `flood` (ops' stories) and `other` (batch's), then expects all to have been served and
  // batch's among the first `batch_within` + 1 to finish.
  void ExpectBatchServedWithin(std::vector<std::thread>* flood, std::thread* other,
                               long batch_within) {
    for (auto& t : *flood) t.join();
    other->join();
    absl::MutexLock l(&finished_mu_);  // the callers are gone; for the annotations
    ASSERT_EQ(finished_.size(), flood->size() + 1);
    const auto pos = std::find(finished_.begin(), finished_.end(), "batch") - finished_.begin();
    EXPECT_LE(pos, batch_within) << "finish order: " << absl::StrJoin(finished_, ",");
    EXPECT_EQ(std::count(finished_.begin(), finished_.end(), "ops"),
              static_cast<long>(flood->size()));
  }

  grpc::Status Call(const std::string& key, tandem::v1::GenerateRequest req = Prompt("hi", 4),
                    std::multimap<std::string, std::string>* trailers = nullptr) {
    return Generate(gateway_.grpc_address, grpc::InsecureChannelCredentials(), key, req, trailers);
  }

  // `method` of tandem.v1.Admin with an empty request and `key` in x-api-key (none when empty).
  template <typename Request, typename Response>
  grpc::Status AdminCall(const std::string& key,
                         grpc::Status (tandem::v1::Admin::Stub::*method)(grpc::ClientContext*,
                                                                         const Request&, Response*),
                         Response* out) {
    auto stub = tandem::v1::Admin::NewStub(
        grpc::CreateChannel(gateway_.grpc_address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    Deadline(&ctx, std::chrono::seconds(10));
    if (!key.empty()) ctx.AddMetadata("x-api-key", key);
    return ((*stub).*method)(&ctx, Request(), out);
  }

  grpc::Status GetPolicy(const std::string& key) {
    tandem::v1::GetPolicyResponse st;
    return AdminCall(key, &tandem::v1::Admin::Stub::GetPolicy, &st);
  }

  // tandem_gateway_tenants_reloads_total{result}; -1 when unreadable.
  double ReloadCount(const std::string& result) {
    return ScrapeMetric(gateway_.metrics_address, "tandem_gateway_tenants_reloads_total",
                        {{"result", result}});
  }

  Server qwen_, nemotron_, gateway_;
  std::string tenants_path_;
  absl::Mutex finished_mu_;
  std::vector<std::string> finished_ ABSL_GUARDED_BY(finished_mu_);
};

// Request content never grants rights: a `tenant` label buys no routing, quota or models.
TEST_F(TenantsTest, ALabelCannotBuyRoutingQuotaOrModels) {
  const std::string policy = WriteTempFile("by-tenant.yaml", R"(schema: 1
version: by-tenant-1
models: {qwen: {vision: true}, nemotron: {}}
classes: [any]
default_class: any
rules:
  - name: pinned
    when: {hint.model: {present: true}}
    action: {route_to_pinned: true}
  - name: ops_get_qwen
    when: {tenant: ops}
    action: {route: qwen}
  - name: rest
    action: {route: nemotron}
)");
  Start({"--policy=" + policy});
  auto route = [&](const std::string& key, const std::string& label) {
    tandem::v1::GenerateRequest r = Prompt("hi", 4);
    (*r.mutable_labels())["tenant"] = label;
    tandem::v1::RouteResponse out;
    EXPECT_TRUE(As(key, r, &out).ok());
    return out.route().rule();
  };
  // Routing: only the key that authenticates as ops gets the ops rule.
  EXPECT_EQ(route("ops-secret", "ops"), "ops_get_qwen");
  EXPECT_EQ(route("search-secret", "ops"), "rest");
  EXPECT_EQ(route("batch-secret", "ops"), "rest");
  // Models: batch may use nemotron only, whoever its label claims to be.
  tandem::v1::GenerateRequest pinned = Prompt("hi", 4);
  pinned.mutable_hints()->set_model("qwen");
  (*pinned.mutable_labels())["tenant"] = "ops";
  EXPECT_EQ(Call("batch-secret", pinned).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // Sessions: the same session id names two sessions for two tenants.
  auto turn = [&](const std::string& key) {
    tandem::v1::GenerateRequest r = Prompt("hi", 4);
    r.set_session_id("shared-name");
    tandem::v1::GenerateResponse out;
    EXPECT_TRUE(As(key, r, &out).ok());
    return out.route().session();
  };
  EXPECT_EQ(turn("ops-secret").turn(), 1);
  EXPECT_EQ(turn("ops-secret").turn(), 2);
  const tandem::v1::SessionInfo other = turn("batch-secret");
  EXPECT_EQ(other.turn(), 1);
  EXPECT_EQ(other.source(), "new");

  // Quota: search's burst of 2 is search's, with or without another tenant's label.
  tandem::v1::GenerateRequest labelled = Prompt("hi", 4);
  (*labelled.mutable_labels())["tenant"] = "ops";
  EXPECT_TRUE(Call("search-secret", labelled).ok());
  EXPECT_TRUE(Call("search-secret", labelled).ok());
  const grpc::Status s = Call("search-secret", labelled);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("tenant 'search'"));
}

TEST_F(TenantsTest, KeysRightsAndRateLimits) {
  Start();
  // No key, or a key no tenant has.
  grpc::Status s = Call("");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  s = Call("wrong-secret");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();

  // A tenant pinned to a model it has no rights to.
  tandem::v1::GenerateRequest pinned = Prompt("hi", 4);
  pinned.mutable_hints()->set_model("qwen");
  s = Call("batch-secret", pinned);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("tenant 'batch' may not use model 'qwen'"));
  pinned.mutable_hints()->set_model("nemotron");
  EXPECT_TRUE(Call("batch-secret", pinned).ok());

  // Routing sees the authenticated tenant, not a caller's `tenant` label.
  {
    tandem::v1::GenerateRequest r = Prompt("hi", 4);
    (*r.mutable_labels())["tenant"] = "ops";
    r.mutable_hints()->set_model("nemotron");
    tandem::v1::RouteResponse route;
    ASSERT_TRUE(As("batch-secret", r, &route).ok());
    EXPECT_EQ(route.features().at("tenant"), "batch");
    // batch's cap on thinking bounds the model's default thinking.
    EXPECT_EQ(route.route().thinking_budget_tokens(), 256);
    // Who capped it is the operator's business: a tenant that is not an admin sees the source
    // without its details, as it sees a rule's name without its conditions.
    EXPECT_EQ(route.route().reasoning_source(), "model default");
  }

  // search: a burst of 2, then one request every 5 s.
  EXPECT_TRUE(Call("search-secret").ok());
  EXPECT_TRUE(Call("search-secret").ok());
  std::multimap<std::string, std::string> trailers;
  s = Call("search-secret", Prompt("hi", 4), &trailers);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("tenant 'search' is over 0.2 requests/s"));
  ASSERT_EQ(trailers.count("retry-after-ms"), 1u);
  const int retry_ms = std::stoi(trailers.find("retry-after-ms")->second);
  EXPECT_GT(retry_ms, 0);
  EXPECT_LE(retry_ms, 5000);
  // The same advice as standard error details (google.rpc.RetryInfo, QuotaFailure).
  auto details = DecodeErrorDetails(s);
  ASSERT_TRUE(details.ok()) << details.status();
  EXPECT_GT(details->retry_delay, absl::ZeroDuration());
  EXPECT_LE(absl::ToInt64Milliseconds(details->retry_delay), retry_ms);
  EXPECT_GT(absl::ToInt64Milliseconds(details->retry_delay), retry_ms - 2);
  EXPECT_THAT(details->quota_subjects, ElementsAre("tenant:search"));
  // Another tenant is not affected.
  EXPECT_TRUE(Call("ops-secret").ok());

  // Admin needs admin: true.
  EXPECT_EQ(GetPolicy("").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(GetPolicy("search-secret").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(GetPolicy("ops-secret").ok());

  // Per-tenant series.
  auto text = HttpGet(gateway_.metrics_address, "/metrics");
  ASSERT_TRUE(text.ok());
  const auto metric = [&](const std::string& name,
                          const std::map<std::string, std::string>& labels) {
    return MetricValue(*text, name, labels).value_or(-1);
  };
  EXPECT_EQ(metric("tandem_gateway_tenant_requests_total", {{"tenant", "search"}, {"code", "OK"}}),
            2);
  EXPECT_EQ(metric("tandem_gateway_tenant_requests_total",
                   {{"tenant", "search"}, {"code", "RESOURCE_EXHAUSTED"}}),
            1);
  EXPECT_EQ(metric("tandem_gateway_tenant_throttled_total",
                   {{"tenant", "search"}, {"reason", "requests"}}),
            1);
  EXPECT_EQ(metric("tandem_gateway_auth_failures_total", {{"reason", "unknown_key"}}), 1);
  EXPECT_EQ(metric("tandem_gateway_auth_failures_total", {{"reason", "admin_denied"}}), 1);
  EXPECT_GT(
      metric("tandem_gateway_tenant_tokens_total", {{"tenant", "batch"}, {"kind", "completion"}}),
      0);
  // Refusals never reached a model: its in-flight gauge is back at 0, not below.
  for (const char* model : {"qwen", "nemotron"}) {
    EXPECT_EQ(metric("tandem_gateway_inflight_requests", {{"model_name", model}}), 0) << model;
  }
  // Latency of the requests that passed the quotas: the two served, not the refused one.
  EXPECT_EQ(metric("tandem_gateway_tenant_request_duration_seconds_count", {{"tenant", "search"}}),
            2);
  EXPECT_EQ(
      metric("tandem_gateway_tenant_time_to_first_token_seconds_count", {{"tenant", "search"}}), 2);
  EXPECT_TRUE(PromtoolCheckMetrics(*text).ok());
}

TEST_F(TenantsTest, OnlyAdminsSeeThePolicysConditionsAndWorkerAddresses) {
  // A rule whose condition names customers: an ordinary tenant must not read it.
  const std::string policy = WriteTempFile("p.yaml", R"(schema: 1
version: secret-1
models: {qwen: {}, nemotron: {}}
classes: [accuracy_critical, latency_critical]
default_class: latency_critical
rules:
  - name: premium
    when: {label.team: {in: [enterprise-customer-x, research]}}
    action: {route: qwen}
  - name: rest
    action: {route: nemotron}
)");
  ASSERT_NO_FATAL_FAILURE(Start({"--policy=" + policy}));
  tandem::v1::GenerateRequest req = Prompt("hi", 4);
  (*req.mutable_labels())["team"] = "research";
  const auto route = [&](const std::string& key, tandem::v1::RouteResponse* out) {
    return As(key, req, out, /*x_api_key=*/true);
  };
  const auto generate = [&](const std::string& key, tandem::v1::GenerateResponse* out) {
    return As(key, req, out, /*x_api_key=*/true);
  };

  tandem::v1::RouteResponse tenant_route, admin_route;
  ASSERT_TRUE(route("search-secret", &tenant_route).ok());
  ASSERT_TRUE(route("ops-secret", &admin_route).ok());
  EXPECT_EQ(tenant_route.route().model(), admin_route.route().model());
  EXPECT_EQ(tenant_route.route().rule(), "premium");
  EXPECT_EQ(tenant_route.rules_size(), 0);
  EXPECT_THAT(tenant_route.ShortDebugString(), Not(HasSubstr("enterprise-customer-x")));
  EXPECT_GE(admin_route.rules_size(), 1);
  EXPECT_THAT(admin_route.ShortDebugString(), HasSubstr("enterprise-customer-x"));

  // batch may use nemotron only; the decision is qwen, so it is refused, which says nothing of
  // the condition either.
  tandem::v1::GenerateResponse tenant_answer, admin_answer;
  const grpc::Status refused = generate("batch-secret", &tenant_answer);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(refused.error_message(), Not(HasSubstr("enterprise-customer-x")));
  (*req.mutable_labels())["team"] = "someone";
  ASSERT_TRUE(generate("batch-secret", &tenant_answer).ok());
  ASSERT_TRUE(generate("ops-secret", &admin_answer).ok());
  EXPECT_EQ(tenant_answer.route().worker(), "") << "a worker address shown to a tenant";
  EXPECT_EQ(admin_answer.route().worker(), nemotron_.grpc_address);
}

TEST_F(TenantsTest, WorkerAddressesAreShownToTenantsWhenTheOperatorSaysSo) {
  ASSERT_NO_FATAL_FAILURE(Start({"--expose_worker_addresses"}));
  tandem::v1::GenerateRequest req = Prompt("hi", 4);
  req.mutable_hints()->set_model("nemotron");
  tandem::v1::GenerateResponse answer;
  ASSERT_TRUE(As("batch-secret", req, &answer, /*x_api_key=*/true).ok());
  EXPECT_EQ(answer.route().worker(), nemotron_.grpc_address);
}

TEST_F(TenantsTest, TenantsFileReloadsWithoutRestart) {
  Start();
  EXPECT_EQ(Call("new-secret").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // An invalid file is refused and the live tenants stay.
  std::ofstream(tenants_path_ + ".tmp") << "tenants:\n  - name: Bad Name\n";
  ASSERT_EQ(std::rename((tenants_path_ + ".tmp").c_str(), tenants_path_.c_str()), 0);
  ASSERT_TRUE(WaitUntil([&] { return ReloadCount("error") == 1; }));
  EXPECT_NE(gateway_.process->ReadLog().find("failed; the live configuration stays"),
            std::string::npos);
  EXPECT_TRUE(Call("ops-secret").ok());
  // A valid edit applies: a new key for search.
  std::ofstream(tenants_path_ + ".tmp") << TenantsYaml("new-secret");
  ASSERT_EQ(std::rename((tenants_path_ + ".tmp").c_str(), tenants_path_.c_str()), 0);
  EXPECT_TRUE(WaitUntil([&] { return Call("new-secret").ok(); }));
  EXPECT_TRUE(WaitUntil([&] { return ReloadCount("ok") == 1; }));  // counted just after it applies
  EXPECT_EQ(ReloadCount("error"), 1);  // the bad file was reported once, not every poll
}

TEST_F(TenantsTest, SighupReloadsTheTenantsFile) {
  // No polling within the test's life: only the signal can apply the edit.
  Start({"--policy_watch_interval=1h"});
  std::ofstream(tenants_path_ + ".tmp") << TenantsYaml("hup-secret");
  ASSERT_EQ(std::rename((tenants_path_ + ".tmp").c_str(), tenants_path_.c_str()), 0);
  EXPECT_EQ(Call("hup-secret").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  gateway_.process->Signal(SIGHUP);
  EXPECT_TRUE(WaitUntil([&] { return Call("hup-secret").ok(); }));
  EXPECT_TRUE(WaitUntil([&] { return ReloadCount("ok") == 1; }));
  // A SIGHUP with an invalid file: counted, and the live tenants stay.
  std::ofstream(tenants_path_) << "tenants: [";
  gateway_.process->Signal(SIGHUP);
  EXPECT_TRUE(WaitUntil([&] { return ReloadCount("error") == 1; }));
  EXPECT_TRUE(Call("hup-secret").ok());
}

TEST_F(TenantsTest, AdminShowsAndReloadsTheLiveTenants) {
  Start({"--policy_watch_interval=1h"});  // only the RPC reloads within the test
  auto ctl = [&](const std::string& key, const std::string& words) {
    std::vector<std::string> args = {"--plaintext", "--gateway=" + gateway_.grpc_address,
                                     "--api_key=" + key};
    for (absl::string_view w : absl::StrSplit(words, ' ')) args.emplace_back(w);
    return RunToExit(tandem::testing::CtlBin(), args);
  };
  auto [code, out] = ctl("ops-secret", "tenants show");
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("path=" + tenants_path_ + " sha256="));
  EXPECT_THAT(out, HasSubstr(" keyless=refused"));
  EXPECT_THAT(out, HasSubstr("search models=all priority=1 requests/s=0.2 tokens/s=unlimited "
                             "concurrency=unlimited keys=1 inflight=0"));
  EXPECT_THAT(out, HasSubstr("batch models=nemotron priority=1 requests/s=unlimited"));
  EXPECT_THAT(out, HasSubstr("ops models=all priority=1 admin requests/s=unlimited"));
  EXPECT_EQ(out.find(Key("ops-secret").substr(7)), std::string::npos) << "no key hashes";

  std::tie(code, out) = ctl("search-secret", "tenants show");
  EXPECT_EQ(code, 1);
  EXPECT_THAT(out, HasSubstr("PERMISSION_DENIED: tenant 'search' may not use tandem.v1.Admin"));

  // A reload answers when the new tenants are live: the new key works at once.
  std::ofstream(tenants_path_ + ".tmp") << TenantsYaml("new-secret");
  ASSERT_EQ(std::rename((tenants_path_ + ".tmp").c_str(), tenants_path_.c_str()), 0);
  std::tie(code, out) = ctl("ops-secret", "tenants reload");
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("search models=all priority=1 requests/s=0.2"));
  EXPECT_THAT(out, HasSubstr("keys=2"));
  EXPECT_TRUE(Call("new-secret").ok());
  EXPECT_EQ(ReloadCount("ok"), 1);

  // An invalid file: INVALID_ARGUMENT with FILE:LINE, and the live tenants stay.
  std::ofstream(tenants_path_) << "tenants:\n  - name: search\n    priority: 1000\n";
  std::tie(code, out) = ctl("ops-secret", "tenants reload");
  EXPECT_EQ(code, 1);
  EXPECT_THAT(out, HasSubstr("INVALID_ARGUMENT: " + tenants_path_ + ":"));
  EXPECT_THAT(out, HasSubstr(tenants_path_ + ":3"));  // the priority's line
  EXPECT_TRUE(Call("new-secret").ok());
  EXPECT_EQ(ReloadCount("error"), 1);
}

// A tenant limited to some models is served by the first of the rule's candidates (its model,
// then its fallbacks) that it may use, and no retry or failover takes it to one it may not.
TEST_F(TenantsTest, ATenantsModelsChooseAmongTheRulesFallbacks) {
  const std::string policy =
      WriteTempFile("fallbacks.yaml", TwoClassPolicy("fallbacks-1", R"(  - name: pinned
    when: {hint.model: {present: true}}
    action: {route_to_pinned: true, fallback: [nemotron]}
  - name: latency
    when: {class: latency_critical}
    action: {route: nemotron, fallback: [qwen]}
  - name: accuracy
    action: {route: qwen, fallback: [nemotron]}
)"));
  Start({"--policy=" + policy});
  auto generate = [&](const std::string& key, tandem::v1::Objective objective,
                      tandem::v1::GenerateResponse* out) {
    tandem::v1::GenerateRequest r = Prompt("hi", 4);
    r.mutable_hints()->set_objective(objective);
    return As(key, r, out, /*x_api_key=*/false, std::chrono::seconds(20));
  };
  // batch may use nemotron only: rule 'accuracy' chose qwen, its fallback nemotron serves.
  tandem::v1::GenerateResponse answer;
  grpc::Status s = generate("batch-secret", tandem::v1::OBJECTIVE_ACCURACY, &answer);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(answer.route().model(), "nemotron");
  EXPECT_EQ(answer.route().rule(), "accuracy");
  // A pin is the caller's own choice: still refused, whatever the pin rule's fallbacks.
  tandem::v1::GenerateRequest pinned = Prompt("hi", 4);
  pinned.mutable_hints()->set_model("qwen");
  s = Call("batch-secret", pinned);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("tenant 'batch' may not use model 'qwen'"));

  // nemotron's worker dies: ops (every model) fails over to qwen; batch is never sent there.
  nemotron_.process->Signal(SIGKILL);
  nemotron_.process->Wait(absl::Seconds(10));
  EXPECT_TRUE(WaitUntil([&] {
    tandem::v1::GenerateResponse out;
    return generate("ops-secret", tandem::v1::OBJECTIVE_LATENCY, &out).ok() &&
           out.route().model() == "qwen";
  }));
  auto qwen_prompts = [&] {
    return ScrapeMetric(qwen_.metrics_address, "tandem_worker_prompt_tokens_total");
  };
  const double before = qwen_prompts();
  for (auto objective : {tandem::v1::OBJECTIVE_LATENCY, tandem::v1::OBJECTIVE_ACCURACY}) {
    s = generate("batch-secret", objective, &answer);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  }
  EXPECT_EQ(qwen_prompts(), before) << "a batch request reached qwen";
}

// Rights a tenants file may not hand out: admin to keyless callers, and a reload that leaves
// no admin to call tandem.v1.Admin.
TEST_F(TenantsTest, AnonymousAdminIsRefusedAtStartUp) {
  const std::string file =
      WriteTempFile("anonymous-admin.yaml",
                    absl::StrCat(TenantsYaml(), "  - name: anonymous\n    admin: true\n"));
  auto [code, log] =
      RunToExit(tandem::testing::GatewayBin(),
                {"--workers=qwen=127.0.0.1:1,nemotron=127.0.0.1:2", "--plaintext",
                 "--worker_plaintext", "--allow_unauthenticated", "--tenants=" + file});
  EXPECT_NE(code, 0) << log;
  EXPECT_THAT(log, HasSubstr(file + ": tenant 'anonymous' may not have admin: true (under "
                                    "--allow_unauthenticated every caller without a key would be "
                                    "an admin)"));
}

TEST_F(TenantsTest, AReloadMayNeitherMakeAnonymousAdminNorLeaveNoAdmin) {
  Start({"--policy_watch_interval=1h", "--allow_unauthenticated"});  // only the RPC reloads
  auto reload = [&](const std::string& key) {
    tandem::v1::ReloadTenantsResponse out;
    return AdminCall(key, &tandem::v1::Admin::Stub::ReloadTenants, &out);
  };
  EXPECT_EQ(GetPolicy("").error_code(), grpc::StatusCode::PERMISSION_DENIED);

  // anonymous made an admin: refused, and keyless callers stay out of Admin.
  ReplaceFile(tenants_path_, absl::StrCat(TenantsYaml(), "  - name: anonymous\n    admin: true\n"));
  grpc::Status s = reload("ops-secret");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("tenant 'anonymous' may not have admin: true"));
  EXPECT_EQ(GetPolicy("").error_code(), grpc::StatusCode::PERMISSION_DENIED);

  // Every admin removed: refused, the old tenants stay, ops can still reload.
  std::string no_admin = TenantsYaml("new-secret");
  no_admin.replace(no_admin.find("    admin: true\n"), 16, "");
  ReplaceFile(tenants_path_, no_admin);
  s = reload("ops-secret");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_THAT(s.error_message(),
              HasSubstr("no tenant has admin: true, so applying it would lock tandem.v1.Admin "
                        "(admins now: ops); the live tenants stay"));
  EXPECT_TRUE(GetPolicy("ops-secret").ok());
  EXPECT_EQ(Call("new-secret").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(ReloadCount("error"), 2);
  EXPECT_NE(gateway_.process->ReadLog().find("would lock tandem.v1.Admin"), std::string::npos);

  // With an admin kept, the same edit applies.
  ReplaceFile(tenants_path_, TenantsYaml("new-secret"));
  EXPECT_TRUE(reload("ops-secret").ok());
  EXPECT_TRUE(Call("new-secret").ok());
}

TEST_F(TenantsTest, FairQueueingServesAWaitingTenantBeforeAFloodersBacklog) {
  // One dispatch slot per model: everything else waits in the gateway's queue. Nemotron's worker
  // is stopped (SIGSTOP: alive, connected, silent) until the queue is arranged below, so the
  // request it holds is still running then however slow the machine: a worker slowed 5x still
  // finished it first under ThreadSanitizer on a loaded 2-core machine, and the queue had room
  // for the seventh. Meanwhile its probes may time out and nothing may count as a stall.
  ASSERT_NO_FATAL_FAILURE(
      Start({"--max_inflight=1", "--max_queued=5", "--worker_probe_timeouts=1000",
             "--stall_timeout_min=0", "--max_queue_wait=120s"}));
  nemotron_.process->Signal(SIGSTOP);
  std::vector<std::thread> flood;
  for (int i = 0; i < 6; ++i) flood.emplace_back([this] { Story("ops", "ops-secret"); });
  // One runs, five wait: only then does the other tenant arrive. (EXPECT, not ASSERT, while
  // the threads run: they must be joined.)
  EXPECT_EQ(WaitForMetric(gateway_.metrics_address, "tandem_gateway_tenant_queued_requests",
                          {{"tenant", "ops"}}, 5)
                .status(),
            absl::OkStatus());
  // The flooder's queue is full: a seventh is refused at once, with retry information.
  std::multimap<std::string, std::string> trailers;
  tandem::v1::GenerateRequest seventh = Prompt("one more", 4);
  seventh.mutable_hints()->set_model("nemotron");  // each model has its own slots
  grpc::Status full = Call("ops-secret", seventh, &trailers);
  EXPECT_EQ(full.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << full.error_message();
  EXPECT_EQ(trailers.count("retry-after-ms"), 1u);
  auto details = DecodeErrorDetails(full);
  EXPECT_TRUE(details.ok()) << details.status();
  if (details.ok()) {
    EXPECT_GT(details->retry_delay, absl::ZeroDuration());
    EXPECT_THAT(details->quota_subjects, ElementsAre("tenant:ops"));
  }
  std::thread other = BatchJoinsTheQueue();
  nemotron_.process->Signal(SIGCONT);
  // batch joined behind five queued ops requests yet is served next.
  ExpectBatchServedWithin(&flood, &other, 2);
}

TEST_F(TenantsTest, FairnessHoldsAtTheWorkersCapacityNotOnlyTheGateways) {
  // The gateway's own limit is far away (--max_inflight 1024): the worker runs one request at a
  // time and would queue 64. By default the gateway dispatches only the worker's batch plus a
  // small headroom (--dispatch_headroom), so a flooding tenant's backlog waits in the fair queue,
  // not in the worker's FIFO, and another tenant's request is served within that many, not
  // after the flood.
  constexpr int kBatch = 1;
  constexpr int kDefaultHeadroom = 2;
  constexpr int kFlood = 8;
  ASSERT_NO_FATAL_FAILURE(Start({"--max_queued=16", "--worker_probe_timeouts=1000",
                                 "--stall_timeout_min=0", "--max_queue_wait=120s"},
                                {absl::StrCat("--max_batch_size=", kBatch), "--max_queue=64"}));
  // The worker is stopped (SIGSTOP: alive, connected, silent) until both tenants' calls are in
  // place, so that no request ends and lets a flooder's next one through before the other tenant
  // arrives, however slow the machine (under TSan with four tests at once, a worker slowed 3x
  // let the other tenant be served 5th, then 9th). Meanwhile its probes may time out and nothing
  // may count as a stall.
  nemotron_.process->Signal(SIGSTOP);
  std::vector<std::thread> flood;
  for (int i = 0; i < kFlood; ++i) {
    flood.emplace_back([this] { Story("ops", "ops-secret"); });
  }
  EXPECT_EQ(WaitForMetric(gateway_.metrics_address, "tandem_gateway_queued_requests",
                          {{"model_name", "nemotron"}}, kFlood - kBatch - kDefaultHeadroom)
                .status(),
            absl::OkStatus());
  std::thread other = BatchJoinsTheQueue();
  nemotron_.process->Signal(SIGCONT);
  ExpectBatchServedWithin(&flood, &other, kBatch + kDefaultHeadroom);
}

TEST(LimitsTest, EveryLimitIsEnforcedBeforeWork) {
  auto worker = StartWorker("qwen", {"--synthetic_time_scale=10"});
  ASSERT_TRUE(worker.ok()) << worker.status();
  auto gateway = StartGateway(
      {"qwen=" + worker->grpc_address, "nemotron=" + worker->grpc_address},
      {"--max_labels=2", "--max_label_bytes=8", "--max_prompt_tokens=50", "--max_tokens_limit=64",
       "--max_stop_sequences=1", "--max_stop_sequence_bytes=4", "--max_messages=2",
       "--max_parts_per_message=1", "--max_stream_duration=1s"});
  ASSERT_TRUE(gateway.ok()) << gateway.status();
  ASSERT_TRUE(WaitForHealth(gateway->grpc_address, "model/qwen", true).ok());
  const auto call = [&](const tandem::v1::GenerateRequest& r) {
    return Generate(gateway->grpc_address, grpc::InsecureChannelCredentials(), "", r);
  };
  struct Case {
    std::function<void(tandem::v1::GenerateRequest*)> edit;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](auto* r) {
         (*r->mutable_labels())["a"] = "1";
         (*r->mutable_labels())["b"] = "2";
         (*r->mutable_labels())["c"] = "3";
       },
       "3 labels; the limit is 2 (--max_labels)"},
      {[](auto* r) { (*r->mutable_labels())["app"] = "far-too-long"; },
       "over 8 bytes (--max_label_bytes)"},
      {[](auto* r) {
         r->mutable_messages(0)->mutable_content(0)->set_text(std::string(2000, 'x'));
       },
       "(--max_prompt_tokens)"},
      {[](auto* r) { r->mutable_sampling()->set_max_tokens(65); }, "(--max_tokens_limit)"},
      {[](auto* r) {
         r->mutable_sampling()->add_stop("a");
         r->mutable_sampling()->add_stop("b");
       },
       "2 sequences; the limit is 1"},
      {[](auto* r) { r->mutable_sampling()->add_stop("abcde"); }, "5 bytes; the limit is 4"},
      {[](auto* r) {
         *r->add_messages() = r->messages(0);
         *r->add_messages() = r->messages(0);
       },
       "3 messages; the limit is 2"},
      {[](auto* r) { r->mutable_messages(0)->add_content()->set_text("x"); }, "the limit is 1"},
  };
  for (const Case& c : cases) {
    tandem::v1::GenerateRequest r = Prompt("hi", 4);
    c.edit(&r);
    grpc::Status s = call(r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.message;
    EXPECT_THAT(s.error_message(), HasSubstr(c.message));
  }
  // Nothing reached the worker for the refused requests: not admitted, not refused there.
  auto before = HttpGet(worker->metrics_address, "/metrics");
  ASSERT_TRUE(before.ok());
  for (const char* reason : {"stop", "length", "cancelled", "deadline_exceeded", "error"}) {
    EXPECT_EQ(MetricValue(*before, "tandem_worker_requests_total", {{"finish_reason", reason}})
                  .value_or(-1),
              0)
        << reason;
  }
  for (const char* reason : {"queue_full", "invalid_argument", "draining", "loading"}) {
    EXPECT_EQ(MetricValue(*before, "tandem_worker_rejected_requests_total", {{"reason", reason}})
                  .value_or(-1),
              0)
        << reason;
  }
  // A stream may not outlive --max_stream_duration, whatever deadline the caller gave: the
  // worker is slowed tenfold so that 60 tokens take seconds.
  tandem::v1::GenerateRequest slow = Prompt("a long answer", 60);
  auto stub = tandem::v1::Gateway::NewStub(
      grpc::CreateChannel(gateway->grpc_address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  Deadline(&ctx, std::chrono::seconds(60));
  const auto start = std::chrono::steady_clock::now();
  auto reader = stub->GenerateStream(&ctx, slow);
  tandem::v1::GenerateStreamChunk chunk;
  while (reader->Read(&chunk)) {
  }
  grpc::Status s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

}  // namespace
}  // namespace tandem::testing
