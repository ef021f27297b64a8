#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tandem/v1/gateway.grpc.pb.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "tools/bench/recorder.h"
#include "tools/bench/run_result.h"
#include "tools/bench/run_spec.h"
#include "tools/bench/text_check.h"

namespace tandem::bench {

struct DriverOptions {
  absl::Duration timeout = absl::Seconds(60);  // deadline of each call
  // Open loop: arrivals beyond this many calls in flight are dropped (CLIENT_OVERLOAD).
  int max_inflight = 20000;
  // --check_text: greedy requests, and every OK answer's text goes here; null when not checking.
  TextCheck* text_check = nullptr;
};

// Runs one RunSpec on gRPC's callback API: open loop (arrivals on a schedule) or closed loop
// (each completion starts the next call). The calls (driver.cc) call back Done() when they end.
class Driver {
 public:
  Driver(const RunSpec& spec, std::vector<std::shared_ptr<grpc::Channel>> channels,
         const DriverOptions& options);

  // Runs the spec to its end and returns the summary.
  RunResult Run() ABSL_LOCKS_EXCLUDED(mu_);

  // Called by every finished call, on a gRPC thread.
  void Done(const grpc::Status& status, Clock::time_point scheduled, Clock::time_point first,
            Clock::time_point last, int tokens, std::vector<double>* gaps) ABSL_LOCKS_EXCLUDED(mu_);

  const RunSpec& spec() const { return spec_; }
  absl::Duration timeout() const { return options_.timeout; }
  tandem::v1::Gateway::Stub* gateway_stub(size_t i) {
    return gateway_stubs_[i % gateway_stubs_.size()].get();
  }
  tandem::v1::Worker::Stub* worker_stub(size_t i) {
    return worker_stubs_[i % worker_stubs_.size()].get();
  }
  const tandem::v1::GenerateRequest& gateway_request() const { return gateway_request_; }
  const tandem::v1::WorkerGenerateRequest& worker_request() const { return worker_request_; }
  // --target=openai: the same request as a streamed chat completion (thinking off).
  const std::string& openai_body() const { return openai_body_; }
  // --check_text: the request's name for TextCheck; empty when not checking.
  const std::string& text_key() const { return text_key_; }
  // An OK answer's text, for --check_text.
  void AddText(const std::string& text, const tandem::v1::Recovery& recovery) {
    options_.text_check->Add(text_key_, text, recovery);
  }

 private:
  void RunOpenLoop(Clock::time_point start, Clock::time_point end) ABSL_LOCKS_EXCLUDED(mu_);
  bool TryStartClosedLoopCall() ABSL_LOCKS_EXCLUDED(mu_);
  bool MayStartLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartCall(Clock::time_point scheduled, size_t n);

  const RunSpec spec_;
  const DriverOptions options_;
  std::vector<std::unique_ptr<tandem::v1::Gateway::Stub>> gateway_stubs_;
  std::vector<std::unique_ptr<tandem::v1::Worker::Stub>> worker_stubs_;
  tandem::v1::GenerateRequest gateway_request_;
  tandem::v1::WorkerGenerateRequest worker_request_;
  std::string openai_body_;
  std::string text_key_;
  Recorder recorder_;
  Clock::time_point end_;

  absl::Mutex mu_;
  int64_t inflight_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t issued_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t remaining_ ABSL_GUARDED_BY(mu_) = -1;  // closed loop with --requests; -1: by time
  bool issuing_done_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tandem::bench
