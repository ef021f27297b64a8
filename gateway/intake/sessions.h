#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "gateway/intake/session_token.h"
#include "tandem/v1/gateway.pb.h"

namespace tandem::gateway {

class GatewayMetrics;

struct SessionOptions {
  // A session not seen for this long is forgotten (--session_ttl); also a token's lifetime.
  std::chrono::seconds ttl{1800};
  // Sessions this replica remembers (--max_sessions); the least recently used go first.
  int64_t max_sessions = 100000;
  // The table's clock (tests replace it).
  std::chrono::steady_clock::time_point (*clock)() = &std::chrono::steady_clock::now;
};

// Where a session stood before this turn.
struct SessionLookup {
  // The model of the session's previous turn; empty for a new (or forgotten) session.
  std::string model;
  // Turns before this one.
  int64_t turns = 0;
  // "token", "table" or "new" (SessionInfo.source).
  const char* source = "new";
};

// Session-aware routing state: which model served each session's last turn. Two sources, so that
// sessions hold across gateway replicas: the route token the caller sends back (any replica with
// the same key honours it) and this replica's table (for callers that send only the id, which
// need the load balancer to keep a session on one replica). Memory is bounded: at most
// max_sessions entries of about kBytesPerSession plus the id's bytes. Thread-safe.
class Sessions {
 public:
  Sessions(SessionOptions options, SessionToken token, GatewayMetrics* metrics = nullptr)
      : options_(options), token_(std::move(token)), metrics_(metrics) {}

  // The key of a session: its id within its tenant's namespace, so that two tenants using the
  // same id (e.g. the same OpenAI `user`) never share, read or move each other's session.
  static std::string Key(std::string_view tenant, std::string_view id);

  // The session's state before this turn: a valid token's, unless the table knows more turns of
  // the session than the token does (a replayed older token), then the table's. `key` is
  // Key(tenant, id): a token is bound to it.
  SessionLookup Lookup(std::string_view key, std::string_view token) ABSL_LOCKS_EXCLUDED(mu_);

  // Records that this turn went to `model`; fills `info`'s turn (the table's count after it, when
  // the table remembers the session: never fewer than turns it has served), source, switched and
  // a new token signed with that turn (the caller sets its id).
  void Record(std::string_view key, const SessionLookup& before, const std::string& model,
              tandem::v1::SessionInfo* info) ABSL_LOCKS_EXCLUDED(mu_);

  // Sessions remembered now.
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

  // Approximate bytes per remembered session besides an id longer than 15 bytes (list node with
  // the entry and its allocator overhead, ~128; hash map slot at its load factor, ~30), for the
  // memory bound stated in docs/configuration.md.
  static constexpr size_t kBytesPerSession = 160;
  static constexpr size_t kMaxIdBytes = 128;

 private:
  struct Entry {
    std::string id;
    std::string model;
    int64_t turns = 0;
    std::chrono::steady_clock::time_point last_seen;
  };
  using List = std::list<Entry>;

  // Drops expired sessions from the least recently used end, then any over max_sessions.
  void EvictLocked(std::chrono::steady_clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SessionOptions options_;
  const SessionToken token_;
  GatewayMetrics* const metrics_;
  mutable absl::Mutex mu_;
  // Most recently used first. The map's keys view the entries' ids, which list nodes keep put.
  List lru_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string_view, List::iterator> by_id_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::gateway
