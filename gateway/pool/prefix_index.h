#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "tandem/v1/gateway.pb.h"

namespace tandem::gateway {

// A request's prompt as a chain of prefixes the workers' prefix caches may hold: one point per
// message (the tools first, when declared), each a hash of everything up to it and its
// estimated tokens. Built once per request.
struct PromptPrefix {
  std::vector<uint64_t> hashes;
  std::vector<int64_t> tokens;  // cumulative estimate at each point
  bool empty() const { return hashes.empty(); }
};

// `partition` as the worker's cache_partition: prompts of different partitions never match.
PromptPrefix PromptPrefixOf(std::string_view partition, const tandem::v1::GenerateRequest& request);

// Which prompt prefixes this gateway sent to which endpoint, recently: its own approximate view
// of the workers' prefix caches (it reads nothing from them, so it works in front of any
// engine). Bounded: least recently used (prefix, endpoint) pairs go first. A pair the worker
// has since evicted only costs a miss. Thread-safe.
class PrefixIndex {
 public:
  explicit PrefixIndex(int64_t max_entries) : max_entries_(max_entries) {}

  // Estimated prompt tokens of the longest prefix of `prefix` last sent to `endpoint`.
  int64_t HitTokens(const PromptPrefix& prefix, std::string_view endpoint) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // `prefix` went to `endpoint`: each of its points is now held there.
  void Record(const PromptPrefix& prefix, std::string_view endpoint) ABSL_LOCKS_EXCLUDED(mu_);
  int64_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const int64_t max_entries_;
  mutable absl::Mutex mu_;
  std::list<uint64_t> lru_ ABSL_GUARDED_BY(mu_);  // front: most recently recorded
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::gateway
