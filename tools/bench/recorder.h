#pragma once

#include <grpcpp/support/status.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "tools/bench/run_result.h"

namespace tandem::bench {

// Collects per-call samples from gRPC's callback threads.
class Recorder {
 public:
  // A finished call: its status, latencies in ms (ttft_ms < 0: none, a unary call), completion
  // tokens and the gaps between its text chunks in ms.
  void Add(const grpc::Status& status, double e2e_ms, double ttft_ms, int tokens,
           const std::vector<double>& gaps) ABSL_LOCKS_EXCLUDED(mu_);
  // An open-loop arrival dropped because too many calls were in flight (CLIENT_OVERLOAD).
  void AddDropped() ABSL_LOCKS_EXCLUDED(mu_);
  // Moves the samples into `r` with their summaries and counts.
  void Fill(RunResult* r) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Mutex mu_;
  int64_t ok_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t tokens_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int64_t> codes_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> errors_ ABSL_GUARDED_BY(mu_);
  std::vector<double> e2e_ ABSL_GUARDED_BY(mu_), ttft_ ABSL_GUARDED_BY(mu_),
      tpot_ ABSL_GUARDED_BY(mu_), gaps_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::bench
