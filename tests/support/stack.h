#pragma once

#include <grpcpp/support/status.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/support/child_process.h"
#include "tests/support/temp_path.h"

namespace tandem::testing {

// A tandem server process started on loopback with port 0.
struct Server {
  std::unique_ptr<ChildProcess> process;
  std::string grpc_address;
  std::string metrics_address;
  // A gateway's --http_listen address; empty when it has none.
  std::string http_address;
};

// Runs a binary expected to exit by itself (e.g. to refuse its flags) for up to `timeout`; returns
// its exit code (-1 if it did not exit normally) and its output (stdout, then stderr).
std::pair<int, std::string> RunToExit(const std::string& binary,
                                      const std::vector<std::string>& args,
                                      absl::Duration timeout = absl::Seconds(20));

// Starts tandem-worker --model=MODEL --device=cpu plus `extra_args`, and waits for its
// "listening" line.
absl::StatusOr<Server> StartWorker(const std::string& model,
                                   const std::vector<std::string>& extra_args = {});
// Starts tandem-gateway with --workers=ENTRIES (MODEL=ADDRESS) plus `extra_args`.
absl::StatusOr<Server> StartGateway(const std::vector<std::string>& worker_entries,
                                    const std::vector<std::string>& extra_args = {});

// One worker for each of `models` (StartWorker with `extra_args`), and their --workers entries
// (MODEL=ADDRESS) in the same order.
struct Workers {
  std::vector<Server> servers;
  std::vector<std::string> entries;
};
absl::StatusOr<Workers> StartWorkers(const std::vector<std::string>& models,
                                     const std::vector<std::string>& extra_args = {});

// StartGateway, returned once its (plaintext) gRPC health says it serves every model the entries
// name. A TLS gateway: WaitForReadyModels.
absl::StatusOr<Server> StartServingGateway(const std::vector<std::string>& worker_entries,
                                           const std::vector<std::string>& extra_args = {});

// A fast qwen worker and a fast nemotron worker (--synthetic_time_scale=0), into `*qwen` and
// `*nemotron`, behind StartServingGateway with `gateway_args`, into `*gateway`; a fatal failure
// when one does not start (call it in ASSERT_NO_FATAL_FAILURE).
void StartTwoModelStack(const std::vector<std::string>& gateway_args, Server* qwen,
                        Server* nemotron, Server* gateway);

// Watches grpc.health.v1 until `service` reports SERVING (or NOT_SERVING when !serving).
absl::Status WaitForHealth(const std::string& address, const std::string& service, bool serving,
                           absl::Duration timeout = absl::Seconds(20));

// A TCP socket connected to 127.0.0.1 at HOST:PORT's port, whose reads give up after 30 s (a
// server that accepts and never answers fails the caller instead of hanging it); -1 on failure.
int ConnectLoopback(const std::string& host_port);

// GET http://HOST:PORT/PATH; the body on 200.
absl::StatusOr<std::string> HttpGet(const std::string& host_port, const std::string& path);

// An HTTP/1.1 answer: its status code, header block and body (as sent, chunked framing left in).
struct HttpAnswer {
  int status = 0;
  std::string headers;
  std::string body;
};
// POST `body` as application/json to http://HOST:PORT/PATH with `headers` ("Name: value" lines)
// on a connection of its own, closed after the answer; an error when no answer comes back (the
// server closed the connection or died).
absl::StatusOr<HttpAnswer> HttpPost(const std::string& host_port, const std::string& path,
                                    const std::string& body,
                                    const std::vector<std::string>& headers = {});
// `request` as raw bytes on a connection of its own (it should end the connection), then the
// answer read to the end; an error when none came back.
absl::StatusOr<HttpAnswer> HttpExchangeRaw(const std::string& host_port,
                                           const std::string& request);

// The value of the sample `name` whose labels include all of `labels`.
absl::StatusOr<double> MetricValue(const std::string& exposition, const std::string& name,
                                   const std::map<std::string, std::string>& labels = {});

// The value of that sample in one read of `address`/metrics (HOST:PORT); -1 when the page or the
// sample cannot be read. For a value already final when it is read.
double ScrapeMetric(const std::string& address, const std::string& name,
                    const std::map<std::string, std::string>& labels = {});

// Polls `address`/metrics until the sample reaches `want` or `timeout` passes; returns the value,
// or DEADLINE_EXCEEDED naming the last value read. For effects that happen on another process's
// thread after an RPC returns.
absl::StatusOr<double> WaitForMetric(const std::string& address, const std::string& name,
                                     const std::map<std::string, std::string>& labels, double want,
                                     absl::Duration timeout = absl::Seconds(10));

// The rich error details of a refusal (google.rpc.Status in grpc-status-details-bin), decoded
// independently of the gateway's encoder: RetryInfo's delay (NOT_FOUND when absent, or when the
// details do not match the status) and the QuotaFailure subjects.
struct ErrorDetails {
  absl::Duration retry_delay;
  std::vector<std::string> quota_subjects;
};
absl::StatusOr<ErrorDetails> DecodeErrorDetails(const grpc::Status& status);

// Runs `promtool check metrics` on the exposition; OK when it reports no problem.
absl::Status PromtoolCheckMetrics(const std::string& exposition);

// Debian's Prometheus server on 127.0.0.1 with port 0, storage in a temp directory, scraping
// `targets` (HOST:PORT of /metrics) every `scrape_interval`. grpc_address holds its HTTP
// address (HOST:PORT) once it logs that it listens. `job_yaml` is added to the scrape job's
// settings (one YAML line per setting, e.g. "scheme: https").
// Prometheus was found at configure time (tests that run it skip, saying so, without it).
bool HavePrometheus();
absl::StatusOr<Server> StartPrometheus(const std::vector<std::string>& targets,
                                       const std::string& scrape_interval = "200ms",
                                       const std::vector<std::string>& job_yaml = {});

// Polls `done` every 10 ms until it returns true or `timeout` passes; returns whether it did.
// For conditions another process reaches asynchronously (never a fixed sleep).
bool WaitUntil(const std::function<bool()>& done, absl::Duration timeout = absl::Seconds(20));

// Waits until the gateway's /metrics (plain HTTP at `metrics_address`) shows one ready worker for
// each of `models`: for gateways whose gRPC health needs TLS. False at the timeout.
bool WaitForReadyModels(const std::string& metrics_address, const std::vector<std::string>& models,
                        absl::Duration timeout = absl::Seconds(20));

}  // namespace tandem::testing
