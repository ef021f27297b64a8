#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "gateway/pool/endpoint.h"
#include "gateway/pool/prefix_index.h"

namespace tandem::gateway {

// How a pool chooses among its usable endpoints.
enum class PickStrategy {
  kLeastOutstanding,  // fewest calls this gateway has in flight there
  kPowerOfTwo,        // two at random, the one with less live load (scraped queue + outstanding)
  kRoundRobin,        // each in turn, whatever its load or cache (a baseline)
  // The one most likely to hold the prompt's prefix in its cache (PrefixIndex), among those
  // whose live load is within PrefixPickOptions::max_imbalance of the least loaded.
  kPrefix,
};

struct PrefixPickOptions {
  // (prefix, endpoint) pairs the pool remembers.
  int64_t index_entries = 1 << 18;
  // An endpoint more loaded than the least loaded by more than this (requests: scraped queue
  // plus this gateway's calls in flight) is passed over whatever it holds, so that one hot
  // prefix does not pile onto one replica.
  int64_t max_imbalance = 4;
  // A smaller expected hit, in estimated tokens, is no reason to prefer an endpoint.
  int64_t min_hit_tokens = 32;
};

// Why Pick chose what it chose.
struct PickInfo {
  // "prefix" (the longest expected hit), "load" (the least loaded; no useful hit, or the
  // holder too loaded), "random2" (power of two) or "round_robin".
  const char* rule = "load";
  int64_t prefix_hit_tokens = 0;  // expected at the chosen endpoint (estimated tokens)
};

// "least_outstanding", "power_of_two", "round_robin" or "prefix"; INVALID_ARGUMENT otherwise.
absl::StatusOr<PickStrategy> ParsePickStrategy(absl::string_view name);

using ClientFactory = std::function<std::unique_ptr<WorkerClient>(const std::string& address)>;

// The endpoints serving one model: a static list, or what a DNS name resolves to (re-resolved
// periodically by WorkerPools). The list is an immutable snapshot swapped atomically, so picks
// never lock; an endpoint removed from DNS lives on while calls hold it.
class ModelPool {
 public:
  ModelPool(std::string name, EndpointOptions options = {}, GatewayMetrics* metrics = nullptr,
            PrefixPickOptions prefix = {})
      : name_(std::move(name)),
        options_(options),
        metrics_(metrics),
        prefix_options_(prefix),
        prefix_index_(prefix.index_entries) {}

  const std::string& name() const { return name_; }
  void AddEndpoint(std::unique_ptr<WorkerClient> client) ABSL_LOCKS_EXCLUDED(write_mu_);
  // Replaces the list: keeps endpoints whose address stays, creates new ones with `factory`.
  // Returns true when it changed.
  bool SetAddresses(const std::vector<std::string>& addresses, const ClientFactory& factory)
      ABSL_LOCKS_EXCLUDED(write_mu_);
  std::shared_ptr<const EndpointList> endpoints() const { return endpoints_.load(); }

  // A usable endpoint not in `exclude`, or UNAVAILABLE with the reason each one is not usable.
  // With `prefix` (whatever the strategy), the choice is recorded as where that prefix now is;
  // kPrefix picks by it. `info` (may be null) says why it was chosen.
  absl::StatusOr<std::shared_ptr<Endpoint>> Pick(
      PickStrategy strategy = PickStrategy::kLeastOutstanding,
      const std::vector<const Endpoint*>& exclude = {}, const PromptPrefix* prefix = nullptr,
      PickInfo* info = nullptr) const;
  int ReadyCount() const;
  // The estimated prompt tokens of `prefix` that the usable endpoint holding most of it holds
  // (0 below the prefix pick's min_hit_tokens): what prefix_hit_tokens.MODEL reads.
  int64_t ExpectedHitTokens(const PromptPrefix& prefix) const;
  // Model facts from the most recently seen worker info (empty before any probe succeeded).
  tandem::v1::ModelStatus Status() const;
  // The same facts without building a ModelStatus, for the per-request checks.
  ModelFacts Facts() const;
  // How many requests the usable endpoints take at once: each one's max_batch_size (from
  // GetInfo) plus `headroom`, at most its own max_queue (all of it when negative); 0 when none
  // is usable or none has reported its batch size.
  int DispatchCapacity(int headroom) const;

 private:
  Endpoint* PickByPrefix(const std::vector<Endpoint*>& usable, const PromptPrefix& prefix,
                         PickInfo* info) const;

  const std::string name_;
  const EndpointOptions options_;
  GatewayMetrics* const metrics_;
  const PrefixPickOptions prefix_options_;
  // Written by picks (const: a pick changes no endpoint); internally locked.
  mutable PrefixIndex prefix_index_;
  mutable std::atomic<uint64_t> next_turn_{0};  // kRoundRobin
  absl::Mutex write_mu_;  // serializes writers of endpoints_ (an atomic: readers never lock)
  std::atomic<std::shared_ptr<const EndpointList>> endpoints_{std::make_shared<EndpointList>()};
};

}  // namespace tandem::gateway
