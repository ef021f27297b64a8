#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/support/child_process.h"

namespace tandem::testing {

// A tandem server process started on loopback with port 0.
struct Server {
  std::unique_ptr<ChildProcess> process;
  std::string grpc_address;
  std::string metrics_address;
};

// Starts tandem-worker --model=MODEL --device=cpu plus `extra_args`, and waits for its
// "listening" line.
absl::StatusOr<Server> StartWorker(const std::string& model,
                                   const std::vector<std::string>& extra_args = {});
// Starts tandem-gateway with --workers=ENTRIES (MODEL=ADDRESS) plus `extra_args`.
absl::StatusOr<Server> StartGateway(const std::vector<std::string>& worker_entries,
                                    const std::vector<std::string>& extra_args = {});

// Watches grpc.health.v1 until `service` reports SERVING (or NOT_SERVING when !serving).
absl::Status WaitForHealth(const std::string& address, const std::string& service, bool serving,
                           absl::Duration timeout = absl::Seconds(20));

// GET http://HOST:PORT/PATH; the body on 200.
absl::StatusOr<std::string> HttpGet(const std::string& host_port, const std::string& path);

// The value of the sample `name` whose labels include all of `labels`.
absl::StatusOr<double> MetricValue(const std::string& exposition, const std::string& name,
                                   const std::map<std::string, std::string>& labels = {});

// Polls `address`/metrics until the sample reaches `want` or `timeout` passes; returns the last
// value read. For effects that happen on another process's thread after an RPC returns.
absl::StatusOr<double> WaitForMetric(const std::string& address, const std::string& name,
                                     const std::map<std::string, std::string>& labels, double want,
                                     absl::Duration timeout = absl::Seconds(10));

// Runs `promtool check metrics` on the exposition; OK when it reports no problem.
absl::Status PromtoolCheckMetrics(const std::string& exposition);

// A fresh path under the test temp directory.
std::string TempPath(const std::string& name);

}  // namespace tandem::testing
