#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tandem::gateway {

// The route token of a session: what the previous turn's model was, signed so that any gateway
// replica holding the same key can honour it without shared state. Bound to the session id (a
// token copied to another session is refused) and to an expiry. It carries no rights: a forged
// one could at most pick a model the caller could pin anyway, and a tenant's models still bound
// it. Thread-safe (immutable).
class SessionToken {
 public:
  struct Claims {
    std::string model;
    // Turns of the session so far, the one that issued the token included.
    int64_t turn = 0;
    int64_t expires_unix_seconds = 0;
  };

  // `key`: the shared secret (--session_key_file), at least kMinKeyBytes.
  explicit SessionToken(std::string key) : key_(std::move(key)) {}
  // A key of this process only: its tokens are honoured by no other replica.
  static SessionToken WithRandomKey();

  std::string Sign(std::string_view session_id, const Claims& claims) const;
  // The claims, or nullopt when the token is malformed, forged, for another session or expired.
  std::optional<Claims> Verify(std::string_view session_id, std::string_view token,
                               int64_t now_unix_seconds) const;

  static constexpr size_t kMinKeyBytes = 32;
  // Longer tokens are not looked at.
  static constexpr size_t kMaxTokenBytes = 256;

 private:
  // Hex of the first 16 bytes of HMAC-SHA256 over the session id and the claims.
  std::string Mac(std::string_view session_id, std::string_view model, int64_t turn,
                  int64_t expires) const;

  const std::string key_;
};

}  // namespace tandem::gateway
