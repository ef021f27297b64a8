#include "tests/support/stack.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <set>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/support/raw_http.h"
#include "tests/support/test_paths.h"

namespace tandem::testing {
namespace {

std::string Field(const std::string& line, const std::string& key) {
  const size_t at = line.find(key + "=");
  if (at == std::string::npos) return "";
  const size_t start = at + key.size() + 1;
  const size_t end = line.find(' ', start);
  return line.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

bool HasFlag(const std::vector<std::string>& args, const std::string& prefix) {
  for (const std::string& a : args) {
    if (a.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

absl::StatusOr<Server> StartServer(const std::string& binary, const std::string& name,
                                   std::vector<std::string> args) {
  // Tests read a server's log right after what they check: every line written at once.
  if (!HasFlag(args, "--log_flush_interval")) args.push_back("--log_flush_interval=0");
  auto process = ChildProcess::Start(binary, args, TempPath(name + ".log"));
  if (!process.ok()) return process.status();
  auto line = (*process)->WaitForLine(" listening ", absl::Seconds(30));
  if (!line.ok()) return line.status();
  Server s;
  s.grpc_address = Field(*line, "grpc");
  s.metrics_address = Field(*line, "metrics");
  s.http_address = Field(*line, "http");
  s.process = std::move(*process);
  return s;
}

}  // namespace

std::pair<int, std::string> RunToExit(const std::string& binary,
                                      const std::vector<std::string>& args,
                                      absl::Duration timeout) {
  auto p = ChildProcess::Start(binary, args, TempPath("run_to_exit.log"));
  if (!p.ok()) return {-1, std::string(p.status().message())};
  // Stdout first: drained before waiting, so a chatty child never blocks on a full pipe.
  const absl::Time deadline = absl::Now() + timeout;
  std::string out = (*p)->ReadStdoutToEnd(deadline - absl::Now());
  const int status = (*p)->Wait(std::max(deadline - absl::Now(), absl::ZeroDuration()));
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out + (*p)->ReadLog()};
}

absl::StatusOr<Server> StartWorker(const std::string& model,
                                   const std::vector<std::string>& extra_args) {
  std::vector<std::string> args = {"--model=" + model, "--device=cpu", "--listen=127.0.0.1:0",
                                   "--metrics_listen=127.0.0.1:0"};
  // Plaintext on loopback unless the test configures TLS itself.
  if (!HasFlag(extra_args, "--tls_")) args.push_back("--plaintext");
  // The load simulator unless the test chooses an engine (the worker requires one).
  if (!HasFlag(extra_args, "--engine")) args.push_back("--engine=synthetic");
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  return StartServer(tandem::testing::WorkerBin(), "worker_" + model, args);
}

absl::StatusOr<Server> StartGateway(const std::vector<std::string>& worker_entries,
                                    const std::vector<std::string>& extra_args) {
  std::vector<std::string> args = {"--workers=" + absl::StrJoin(worker_entries, ","),
                                   "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                                   "--worker_probe_interval=50ms"};
  // Plaintext and no API keys unless the test configures TLS or tenants itself.
  if (!HasFlag(extra_args, "--tls_")) args.push_back("--plaintext");
  if (!HasFlag(extra_args, "--worker_tls_")) args.push_back("--worker_plaintext");
  if (!HasFlag(extra_args, "--tenants")) args.push_back("--allow_unauthenticated");
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  return StartServer(tandem::testing::GatewayBin(), "gateway", args);
}

absl::StatusOr<Workers> StartWorkers(const std::vector<std::string>& models,
                                     const std::vector<std::string>& extra_args) {
  Workers out;
  for (const std::string& model : models) {
    auto w = StartWorker(model, extra_args);
    if (!w.ok()) return w.status();
    out.entries.push_back(absl::StrCat(model, "=", w->grpc_address));
    out.servers.push_back(std::move(*w));
  }
  return out;
}

absl::StatusOr<Server> StartServingGateway(const std::vector<std::string>& worker_entries,
                                           const std::vector<std::string>& extra_args) {
  auto gateway = StartGateway(worker_entries, extra_args);
  if (!gateway.ok()) return gateway.status();
  std::set<std::string> models;
  for (const std::string& entry : worker_entries) models.insert(entry.substr(0, entry.find('=')));
  for (const std::string& model : models) {
    absl::Status serving = WaitForHealth(gateway->grpc_address, "model/" + model, true);
    if (!serving.ok()) return serving;
  }
  return gateway;
}

void StartTwoModelStack(const std::vector<std::string>& gateway_args, Server* qwen,
                        Server* nemotron, Server* gateway) {
  auto workers = StartWorkers({"qwen", "nemotron"}, {"--synthetic_time_scale=0"});
  ASSERT_TRUE(workers.ok()) << workers.status();
  auto g = StartServingGateway(workers->entries, gateway_args);
  ASSERT_TRUE(g.ok()) << g.status();
  *qwen = std::move(workers->servers[0]);
  *nemotron = std::move(workers->servers[1]);
  *gateway = std::move(*g);
}

absl::Status WaitForHealth(const std::string& address, const std::string& service, bool serving,
                           absl::Duration timeout) {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  ctx.set_wait_for_ready(true);
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  auto reader = stub->Watch(&ctx, req);
  grpc::health::v1::HealthCheckResponse resp;
  const auto want = serving ? grpc::health::v1::HealthCheckResponse::SERVING
                            : grpc::health::v1::HealthCheckResponse::NOT_SERVING;
  while (reader->Read(&resp)) {
    if (resp.status() == want) {
      ctx.TryCancel();
      reader->Finish();
      return absl::OkStatus();
    }
  }
  grpc::Status s = reader->Finish();
  return absl::DeadlineExceededError(
      absl::StrCat("health of '", service, "' at ", address, " never became ",
                   serving ? "SERVING" : "NOT_SERVING", ": ", s.error_message()));
}

int ConnectLoopback(const std::string& host_port) {
  const size_t colon = host_port.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(host_port.substr(colon + 1), &port)) {
    return -1;
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const timeval patience{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof(patience));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

absl::StatusOr<std::string> HttpGet(const std::string& host_port, const std::string& path) {
  const int fd = ConnectLoopback(host_port);
  if (fd < 0) return absl::UnavailableError("cannot connect to " + host_port);
  const std::string req =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", host_port, "\r\nConnection: close\r\n\r\n");
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return absl::UnavailableError("write failed");
  }
  const std::string resp = ReadUntilClosed(fd);
  close(fd);
  const size_t body = resp.find("\r\n\r\n");
  if (resp.rfind("HTTP/1.1 200", 0) != 0 && resp.rfind("HTTP/1.0 200", 0) != 0) {
    return absl::UnavailableError("HTTP error: " + resp.substr(0, resp.find('\r')));
  }
  return body == std::string::npos ? "" : resp.substr(body + 4);
}

absl::StatusOr<HttpAnswer> HttpExchangeRaw(const std::string& host_port,
                                           const std::string& request) {
  const int fd = ConnectLoopback(host_port);
  if (fd < 0) return absl::UnavailableError("cannot connect to " + host_port);
  // A server may answer (413, 400, 401) and close before it has read the whole body: stop
  // writing then, and read what it said.
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  const std::string resp = ReadUntilClosed(fd);
  close(fd);
  const size_t end = resp.find("\r\n\r\n");
  HttpAnswer out;
  if (end == std::string::npos || resp.size() < 12 ||
      !absl::SimpleAtoi(resp.substr(9, 3), &out.status)) {
    return absl::UnavailableError(
        absl::StrCat("no HTTP answer from ", host_port, " (", resp.size(), " bytes)"));
  }
  out.headers = resp.substr(0, end);
  out.body = resp.substr(end + 4);
  return out;
}

absl::StatusOr<HttpAnswer> HttpPost(const std::string& host_port, const std::string& path,
                                    const std::string& body,
                                    const std::vector<std::string>& headers) {
  std::string req = absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: ", host_port,
                                 "\r\nConnection: close\r\nContent-Type: application/json\r\n"
                                 "Content-Length: ",
                                 body.size(), "\r\n");
  for (const std::string& h : headers) absl::StrAppend(&req, h, "\r\n");
  absl::StrAppend(&req, "\r\n", body);
  return HttpExchangeRaw(host_port, req);
}

absl::StatusOr<double> MetricValue(const std::string& exposition, const std::string& name,
                                   const std::map<std::string, std::string>& labels) {
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t brace = line.find('{');
    const size_t space = line.rfind(' ');
    const absl::string_view sample_name = line.substr(0, std::min(brace, space));
    if (sample_name != name) continue;
    std::map<std::string, std::string> got;
    if (brace != absl::string_view::npos) {
      const size_t close = line.find('}', brace);
      for (absl::string_view kv :
           absl::StrSplit(line.substr(brace + 1, close - brace - 1), ',', absl::SkipEmpty())) {
        const size_t eq = kv.find('=');
        std::string value(kv.substr(eq + 1));
        if (value.size() >= 2) value = value.substr(1, value.size() - 2);
        got[std::string(kv.substr(0, eq))] = value;
      }
    }
    bool match = true;
    for (const auto& [k, v] : labels) {
      auto it = got.find(k);
      if (it == got.end() || it->second != v) match = false;
    }
    if (!match) continue;
    double value = 0;
    if (!absl::SimpleAtod(line.substr(space + 1), &value)) {
      return absl::InternalError(absl::StrCat("bad sample: ", line));
    }
    return value;
  }
  return absl::NotFoundError(absl::StrCat("no sample ", name));
}

double ScrapeMetric(const std::string& address, const std::string& name,
                    const std::map<std::string, std::string>& labels) {
  auto text = HttpGet(address, "/metrics");
  return text.ok() ? MetricValue(*text, name, labels).value_or(-1) : -1;
}

absl::StatusOr<double> WaitForMetric(const std::string& address, const std::string& name,
                                     const std::map<std::string, std::string>& labels, double want,
                                     absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<double> last = absl::NotFoundError("not read");
  while (absl::Now() < deadline) {
    auto text = HttpGet(address, "/metrics");
    if (text.ok()) {
      last = MetricValue(*text, name, labels);
      if (last.ok() && *last == want) return last;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // Not the last value as a success: a sample that exists at 0 from the start would pass every
  // caller's ok() check at the timeout.
  return absl::DeadlineExceededError(absl::StrCat(
      name, " did not reach ", want, " within ", absl::FormatDuration(timeout), ": ",
      last.ok() ? absl::StrCat("last read ", *last) : last.status().ToString()));
}

absl::StatusOr<ErrorDetails> DecodeErrorDetails(const grpc::Status& status) {
  google::rpc::Status details;
  if (status.error_details().empty() || !details.ParseFromString(status.error_details())) {
    return absl::NotFoundError("no google.rpc.Status in the error details");
  }
  if (details.code() != static_cast<int>(status.error_code()) ||
      details.message() != status.error_message()) {
    return absl::NotFoundError(
        absl::StrCat("details say ", details.code(), " '", details.message(), "'"));
  }
  ErrorDetails out;
  bool has_retry = false;
  for (const auto& any : details.details()) {
    google::rpc::RetryInfo retry;
    google::rpc::QuotaFailure quota;
    if (any.UnpackTo(&retry)) {
      has_retry = true;
      out.retry_delay = absl::Seconds(retry.retry_delay().seconds()) +
                        absl::Nanoseconds(retry.retry_delay().nanos());
    } else if (any.UnpackTo(&quota)) {
      for (const auto& v : quota.violations()) out.quota_subjects.push_back(v.subject());
    }
  }
  if (!has_retry) return absl::NotFoundError("no RetryInfo in the error details");
  return out;
}

absl::Status PromtoolCheckMetrics(const std::string& exposition) {
  if (std::string(tandem::testing::PromtoolBin()).empty()) {
    std::cerr << "promtool was not found at configure time (Debian package prometheus): the "
                 "metrics lint is skipped\n";
    return absl::OkStatus();
  }
  const std::string in = TempPath("metrics.txt");
  const std::string out = TempPath("promtool.txt");
  std::ofstream(in) << exposition;
  const std::string cmd =
      absl::StrCat(tandem::testing::PromtoolBin(), " check metrics < ", in, " > ", out, " 2>&1");
  const int rc = std::system(cmd.c_str());
  std::ifstream result(out);
  std::string report((std::istreambuf_iterator<char>(result)), std::istreambuf_iterator<char>());
  if (rc != 0 || !report.empty()) {
    return absl::InternalError(absl::StrCat("promtool check metrics failed (", rc, "):\n", report));
  }
  return absl::OkStatus();
}

bool WaitUntil(const std::function<bool()>& done, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

bool WaitForReadyModels(const std::string& metrics_address, const std::vector<std::string>& models,
                        absl::Duration timeout) {
  return WaitUntil(
      [&] {
        auto m = HttpGet(metrics_address, "/metrics");
        if (!m.ok()) return false;
        for (const std::string& model : models) {
          if (MetricValue(*m, "tandem_gateway_ready_workers", {{"model_name", model}})
                  .value_or(0) != 1) {
            return false;
          }
        }
        return true;
      },
      timeout);
}

bool HavePrometheus() { return !std::string(tandem::testing::PrometheusBin()).empty(); }

absl::StatusOr<Server> StartPrometheus(const std::vector<std::string>& targets,
                                       const std::string& scrape_interval,
                                       const std::vector<std::string>& job_yaml) {
  if (std::string(tandem::testing::PrometheusBin()).empty()) {
    return absl::FailedPreconditionError(
        "prometheus was not found at configure time (Debian package prometheus)");
  }
  std::string targets_yaml;
  for (const auto& t : targets)
    absl::StrAppend(&targets_yaml, targets_yaml.empty() ? "" : ", ", "'", t, "'");
  std::string job;
  for (const auto& line : job_yaml) absl::StrAppend(&job, "    ", line, "\n");
  const std::string config = WriteTempFile(
      "prometheus.yml", absl::StrCat("global: {scrape_interval: ", scrape_interval,
                                     ", evaluation_interval: ", scrape_interval,
                                     "}\nscrape_configs:\n  - job_name: tandem\n", job,
                                     "    static_configs: [{targets: [", targets_yaml, "]}]\n"));
  const std::string data = TempPath("prometheus-data");
  // Prometheus logs to stderr; the shell points it at the pipe the "Listening on" line is read
  // from, and exec keeps the pid so the destructor's signals reach Prometheus itself.
  const std::string cmd =
      absl::StrCat("exec ", tandem::testing::PrometheusBin(), " --config.file=", config,
                   " --storage.tsdb.path=", data, " --web.listen-address=127.0.0.1:0 2>&1");
  auto process = ChildProcess::Start("/bin/sh", {"-c", cmd}, TempPath("prometheus.log"));
  if (!process.ok()) return process.status();
  auto line = (*process)->WaitForLine("msg=\"Listening on\"", absl::Seconds(30));
  if (!line.ok()) return line.status();
  Server s;
  s.grpc_address = Field(*line, "address");
  s.process = std::move(*process);
  if (s.grpc_address.empty()) return absl::InternalError("no address in: " + *line);
  return s;
}

}  // namespace tandem::testing
