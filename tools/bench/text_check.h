#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "tandem/v1/gateway.pb.h"

namespace tandem::bench {

// Text of OK answers against a fault-free reference, per request (--check_text). Answers are
// kept as distinct texts with counts, and compared when the runs are over: a reference may come
// after the answers it judges. Thread-safe: answers arrive on gRPC's callback threads.
class TextCheck {
 public:
  struct Summary {
    int64_t answers = 0;     // OK answers seen
    int64_t checked = 0;     // of them, compared with a reference
    int64_t failovers = 0;   // compared answers that were failed over mid-stream
    int64_t retries = 0;     // compared answers that were retried (and not failed over)
    int64_t mismatches = 0;  // compared answers whose text differs from the reference
    int64_t failover_mismatches = 0;
    int64_t unreferenced = 0;           // answers to a request that never had a fault-free answer
    std::vector<std::string> examples;  // a few mismatches, described
  };

  // An OK answer to the request named `key`.
  void Add(const std::string& key, const std::string& text, const tandem::v1::Recovery& r)
      ABSL_LOCKS_EXCLUDED(mu_);

  Summary Summarize() const ABSL_LOCKS_EXCLUDED(mu_);

  // The summary as the "text_check" member of --json (with its leading ",\n") and as the lines
  // printed after the table.
  static std::string Json(const Summary& t);
  static std::string Text(const Summary& t);

 private:
  struct Texts {
    int64_t clean = 0, failovers = 0, retries = 0;
    std::string events;  // the first recovered answer's Recovery.events
  };

  static std::string Describe(const std::string& key, const std::string& want,
                              const std::string& got, const Texts& t);

  mutable absl::Mutex mu_;
  // Request name -> answer text -> how it was answered.
  std::map<std::string, std::map<std::string, Texts>> texts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::bench
