#pragma once

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "prometheus/counter.h"
#include "tandem/v1/admin.pb.h"

namespace tandem::gateway {

// Appends routing decisions to a JSON-lines file (one tandem.v1.DecisionRecord per line) for
// `tandemctl policy replay`. Record() never blocks a reactor: a writer thread owns the file, and
// when it falls more than `max_pending` records behind, new records are dropped and counted.
class DecisionLog {
 public:
  static absl::StatusOr<std::unique_ptr<DecisionLog>> Open(const std::string& path,
                                                           size_t max_pending,
                                                           prometheus::Counter* written,
                                                           prometheus::Counter* dropped);
  ~DecisionLog();

  void Record(tandem::v1::DecisionRecord record);

 private:
  DecisionLog(std::FILE* file, size_t max_pending, prometheus::Counter* written,
              prometheus::Counter* dropped);
  void Loop();

  std::FILE* const file_;
  const size_t max_pending_;
  prometheus::Counter* const written_;
  prometheus::Counter* const dropped_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<tandem::v1::DecisionRecord> pending_;  // guarded by mu_
  bool stop_ = false;                               // guarded by mu_
  std::thread writer_;
};

}  // namespace tandem::gateway
