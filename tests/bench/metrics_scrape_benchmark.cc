// What one scrape of a worker's /metrics costs, end to end on loopback: plain HTTP, HTTPS, and
// HTTPS with a client certificate (--metrics_tls with --tls_client_ca); on a kept-alive
// connection (what the gateway's scrape thread and Prometheus do) and on a new connection each
// time (a full TLS handshake per scrape).
// Run: build/tests/metrics_scrape_benchmark
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/metrics_server.h"
#include "common/http_client.h"
#include "prometheus/registry.h"
#include "tests/support/pki.h"
#include "workers/worker_metrics.h"

namespace {

using tandem::MetricsServer;
using tandem::MetricsServerOptions;
using tandem::TlsFiles;

enum Mode { kPlain, kTls, kMutualTls };

struct Fixture {
  tandem::testing::TestCa ca;
  tandem::testing::TestCert server, client;
};

const Fixture& Certs() {
  static const Fixture* f = [] {
    auto ca = tandem::testing::TestCa::Create("bench");
    if (!ca.ok()) std::abort();
    auto* out = new Fixture{std::move(*ca), {}, {}};
    auto server = out->ca.Issue("worker");
    auto client = out->ca.Issue("gateway-client");
    if (!server.ok() || !client.ok()) std::abort();
    out->server = *server;
    out->client = *client;
    return out;
  }();
  return *f;
}

void BM_ScrapeWorkerMetrics(benchmark::State& state) {
  const Mode mode = static_cast<Mode>(state.range(0));
  const bool reuse = state.range(1) != 0;
  auto registry = std::make_shared<prometheus::Registry>();
  // The worker's real families, so the page is the size the gateway really reads.
  tandem::workers::WorkerMetrics metrics(*registry,
                                         {"qwen", "Qwen/Qwen3.5-35B-A3B", "native", "0", "H200"});
  MetricsServerOptions options;
  TlsFiles client;
  if (mode != kPlain) {
    options.tls = {Certs().server.cert, Certs().server.key,
                   mode == kMutualTls ? Certs().ca.ca_cert() : ""};
    client.ca = Certs().ca.ca_cert();
    if (mode == kMutualTls) {
      client.cert = Certs().client.cert;
      client.key = Certs().client.key;
    }
  }
  auto server = MetricsServer::Start("127.0.0.1:0", registry, options);
  if (!server.ok()) {
    state.SkipWithError(std::string(server.status().message()).c_str());
    return;
  }
  auto http = std::make_unique<tandem::CurlHttpClient>(client);
  const std::string url =
      absl::StrCat((*server)->Scheme(), "://", (*server)->Address(), "/metrics");
  size_t bytes = 0;
  for (auto _ : state) {
    if (!reuse) http = std::make_unique<tandem::CurlHttpClient>(client);
    auto body = http->Get(url, absl::Seconds(5));
    if (!body.ok()) {
      state.SkipWithError(std::string(body.status().message()).c_str());
      return;
    }
    bytes = body->size();
  }
  state.counters["page_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_ScrapeWorkerMetrics)
    ->ArgNames({"plain0_tls1_mtls2", "reuse"})
    ->ArgsProduct({{kPlain, kTls, kMutualTls}, {1, 0}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
