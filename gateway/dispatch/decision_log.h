#pragma once

#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
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
  ~DecisionLog() ABSL_LOCKS_EXCLUDED(mu_);

  void Record(tandem::v1::DecisionRecord record) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  DecisionLog(std::FILE* file, size_t max_pending, prometheus::Counter* written,
              prometheus::Counter* dropped);
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  std::FILE* const file_;
  const size_t max_pending_;
  prometheus::Counter* const written_;
  prometheus::Counter* const dropped_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<tandem::v1::DecisionRecord> pending_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread writer_;
};

}  // namespace tandem::gateway
