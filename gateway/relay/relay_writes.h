#pragma once

#include <grpcpp/support/status.h>

#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tandem::gateway {

// The writes of one streamed answer (a gRPC stream or server-sent events), shared by the relay
// that starts them, their completions and the end of the upstream, which come on different
// threads: one write in flight at a time; the answer finishes exactly once, and only after its
// last write completed; a client that stopped reading turns a successful end into CANCELLED
// (it did not get the whole answer). Both fronts' calls hold one.
class RelayWrites {
 public:
  // What the call does after a write completed.
  enum class Next {
    kResume,      // read the next chunk
    kClientGone,  // the client stopped reading: cancel the attempts, then read (to their end)
    kFinish,      // the upstream already ended: finish the answer
  };

  // Before each write.
  void WriteStarted() ABSL_LOCKS_EXCLUDED(mu_);
  // A write completed; `ok` is false when the client did not take it.
  Next WriteDone(bool ok) ABSL_LOCKS_EXCLUDED(mu_);
  // The upstream ended with `status`. True when the answer finishes now; false while a write is
  // in flight (its WriteDone says kFinish).
  bool UpstreamDone(const grpc::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  // The status the answer finishes with, the first time only; nullopt after.
  std::optional<grpc::Status> TakeFinish() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Mutex mu_;
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool upstream_done_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool client_gone_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status upstream_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::gateway
