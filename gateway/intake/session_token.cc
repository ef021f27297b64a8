#include "gateway/intake/session_token.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tandem::gateway {
namespace {

constexpr char kTokenVersion[] = "1";

// Debian's Abseil has its own string_view.
absl::string_view View(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace

SessionToken SessionToken::WithRandomKey() {
  std::string key(kMinKeyBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(key.data()), static_cast<int>(key.size())) != 1) {
    // A predictable key would let anyone forge tokens; there is no safe way on.
    std::fprintf(stderr, "tandem-gateway: no random bytes for the session key (RAND_bytes)\n");
    std::abort();
  }
  return SessionToken(std::move(key));
}

std::string SessionToken::Mac(std::string_view session_id, std::string_view model, int64_t turn,
                              int64_t expires) const {
  // NUL-separated: neither an id nor a model name holds a NUL, so fields cannot run together.
  const std::string nul(1, '\0');
  const std::string message = absl::StrCat("tandem-session-", kTokenVersion, nul, View(session_id),
                                           nul, View(model), nul, turn, nul, expires);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac,
           &length) == nullptr) {
    return "";  // no MAC: Verify refuses every token, Sign's tokens verify nowhere
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(mac), std::min(length, 16u)));
}

std::string SessionToken::Sign(std::string_view session_id, const Claims& c) const {
  return absl::StrCat(kTokenVersion, ".", c.model, ".", c.turn, ".", c.expires_unix_seconds, ".",
                      Mac(session_id, c.model, c.turn, c.expires_unix_seconds));
}

std::optional<SessionToken::Claims> SessionToken::Verify(std::string_view session_id,
                                                         std::string_view token,
                                                         int64_t now) const {
  if (token.empty() || token.size() > kMaxTokenBytes) return std::nullopt;
  // VERSION.MODEL.TURN.EXPIRES.MAC, split from the right: a model name may hold dots.
  std::string_view fields[3];  // MAC, EXPIRES, TURN
  std::string_view rest = token;
  for (std::string_view& field : fields) {
    const size_t dot = rest.rfind('.');
    if (dot == std::string_view::npos) return std::nullopt;
    field = rest.substr(dot + 1);
    rest = rest.substr(0, dot);
  }
  const size_t first = rest.find('.');
  if (first == std::string_view::npos || rest.substr(0, first) != kTokenVersion)
    return std::nullopt;
  Claims c;
  c.model = std::string(rest.substr(first + 1));
  if (c.model.empty() || !absl::SimpleAtoi(View(fields[1]), &c.expires_unix_seconds) ||
      !absl::SimpleAtoi(View(fields[2]), &c.turn) || c.turn < 1) {
    return std::nullopt;
  }
  const std::string want = Mac(session_id, c.model, c.turn, c.expires_unix_seconds);
  if (want.empty() || fields[0].size() != want.size() ||
      CRYPTO_memcmp(fields[0].data(), want.data(), want.size()) != 0) {
    return std::nullopt;
  }
  if (c.expires_unix_seconds <= now) return std::nullopt;
  return c;
}

}  // namespace tandem::gateway
