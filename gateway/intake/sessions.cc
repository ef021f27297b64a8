#include "gateway/intake/sessions.h"

#include "gateway/metrics/gateway_metrics.h"

namespace tandem::gateway {
namespace {

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string Sessions::Key(std::string_view tenant, std::string_view id) {
  // A NUL cannot occur in a tenant name or a session id (both visible ASCII).
  std::string key(tenant);
  key.push_back('\0');
  key.append(id);
  return key;
}

SessionLookup Sessions::Lookup(std::string_view id, std::string_view token) {
  SessionLookup out;
  std::optional<SessionToken::Claims> claims = token_.Verify(id, token, UnixSeconds());
  const auto now = options_.clock();
  {
    absl::MutexLock l(&mu_);
    auto it = by_id_.find(id);
    if (it != by_id_.end() && now - it->second->last_seen <= options_.ttl) {
      out.model = it->second->model;
      out.turns = it->second->turns;
      out.source = "table";
    }
  }
  // The token is the caller's latest answer, possibly from another replica, unless this table
  // has served the session since it was signed: a replayed older token tells less than the table
  // knows. On a tie the token wins (another replica may have moved the session meanwhile).
  if (claims.has_value() && claims->turn >= out.turns) {
    out.model = std::move(claims->model);
    out.turns = claims->turn;
    out.source = "token";
  }
  return out;
}

void Sessions::Record(std::string_view id, const SessionLookup& before, const std::string& model,
                      tandem::v1::SessionInfo* info) {
  const auto now = options_.clock();
  // What the table holds after this turn when it has one (turns recorded since `before` was
  // looked up count too); else what `before` knew.
  int64_t turn = before.turns + 1;
  const bool switched = !before.model.empty() && before.model != model;
  size_t remembered = 0;
  if (options_.max_sessions > 0) {
    absl::MutexLock l(&mu_);
    auto it = by_id_.find(id);
    if (it == by_id_.end()) {
      lru_.push_front(Entry{std::string(id), model, turn, now});
      by_id_.emplace(lru_.front().id, lru_.begin());
    } else {
      Entry& e = *it->second;
      const bool expired = now - e.last_seen > options_.ttl;
      e.model = model;
      // A token may know of turns served by other replicas; a forgotten session starts over.
      e.turns = expired ? turn : std::max(e.turns + 1, turn);
      turn = e.turns;
      e.last_seen = now;
      lru_.splice(lru_.begin(), lru_, it->second);
    }
    EvictLocked(now);
    remembered = lru_.size();
  }
  info->set_turn(turn);
  info->set_source(before.source);
  info->set_switched(switched);
  info->set_token(token_.Sign(
      id,
      {model, turn,
       UnixSeconds() + std::chrono::duration_cast<std::chrono::seconds>(options_.ttl).count()}));
  if (metrics_ != nullptr) metrics_->CountSessionTurn(before.source, switched, remembered);
}

void Sessions::EvictLocked(std::chrono::steady_clock::time_point now) {
  while (!lru_.empty()) {
    const Entry& oldest = lru_.back();
    const bool expired = now - oldest.last_seen > options_.ttl;
    const bool over = static_cast<int64_t>(lru_.size()) > options_.max_sessions;
    if (!expired && !over) break;
    if (metrics_ != nullptr) metrics_->CountSessionEviction(expired ? "ttl" : "capacity");
    by_id_.erase(oldest.id);
    lru_.pop_back();
  }
}

size_t Sessions::size() const {
  absl::MutexLock l(&mu_);
  return lru_.size();
}

}  // namespace tandem::gateway
