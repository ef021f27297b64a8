#pragma once

// HTTP/1.1 over a raw socket, for tests that send what no client library would: a few blocking
// helpers and a splitter of the answers one connection received, strict enough to catch a server
// that frames its answers wrongly (a body to HEAD, a bad chunk, a length that lies).
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

namespace tandem::testing {

struct RawResponse {
  int status = 0;
  std::string head;  // the status line and headers, CRLFs included
  std::string body;  // de-chunked
  // The value of header `name` (any case) in the head; empty when absent.
  std::string Header(absl::string_view name) const {
    for (absl::string_view line : absl::StrSplit(head, "\r\n")) {
      const size_t colon = line.find(':');
      if (colon == absl::string_view::npos) continue;
      if (absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(line.substr(0, colon)), name)) {
        return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      }
    }
    return "";
  }
  bool Closes() const { return absl::EqualsIgnoreCase(Header("connection"), "close"); }
};

// Splits what a server sent on one connection into its answers, interim (1xx) ones included.
// `bodiless`: the indexes of the answers to HEAD (no body whatever their headers say). An answer
// with neither Content-Length nor chunked coding runs to the end. Stops at the first answer that
// does not parse or is incomplete; `*rest` then holds the bytes from there.
inline std::vector<RawResponse> SplitResponses(absl::string_view bytes,
                                               const std::set<size_t>& bodiless = {},
                                               std::string* rest = nullptr) {
  std::vector<RawResponse> out;
  while (!bytes.empty()) {
    const size_t end = bytes.find("\r\n\r\n");
    if (end == absl::string_view::npos || !absl::StartsWith(bytes, "HTTP/1.1 ")) break;
    RawResponse r;
    r.head = std::string(bytes.substr(0, end + 4));
    if (!absl::SimpleAtoi(bytes.substr(9, 3), &r.status)) break;
    absl::string_view body = bytes.substr(end + 4);
    const bool no_body =
        bodiless.count(out.size()) > 0 || r.status < 200 || r.status == 204 || r.status == 304;
    size_t used = 0;
    uint64_t length = 0;
    if (no_body) {
      used = 0;
    } else if (absl::EqualsIgnoreCase(r.Header("transfer-encoding"), "chunked")) {
      bool ok = false;
      while (true) {
        const size_t line = body.find("\r\n", used);
        if (line == absl::string_view::npos) break;
        uint64_t size = 0;
        if (!absl::SimpleHexAtoi(body.substr(used, line - used), &size)) break;
        used = line + 2;
        if (size == 0) {
          ok = absl::StartsWith(body.substr(used), "\r\n");
          used += 2;
          break;
        }
        if (body.size() < used + size + 2 || body.substr(used + size, 2) != "\r\n") break;
        r.body.append(body.data() + used, size);
        used += size + 2;
      }
      if (!ok) break;
    } else if (absl::SimpleAtoi(r.Header("content-length"), &length)) {
      if (body.size() < length) break;
      r.body = std::string(body.substr(0, length));
      used = length;
    } else {
      r.body = std::string(body);
      used = body.size();
    }
    bytes.remove_prefix(end + 4 + used);
    out.push_back(std::move(r));
  }
  if (rest != nullptr) *rest = std::string(bytes);
  return out;
}

inline bool SendAll(int fd, absl::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Reads until the peer closes (or resets, or the socket's receive timeout passes).
inline std::string ReadUntilClosed(int fd) {
  std::string out;
  char buf[8192];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// Reads until `out` holds `count` complete answers (see SplitResponses), the peer closes, or the
// receive timeout passes; returns what came.
inline std::string ReadResponses(int fd, size_t count, const std::set<size_t>& bodiless = {}) {
  std::string out;
  char buf[8192];
  while (SplitResponses(out, bodiless).size() < count) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// Reads `fd` until the peer closes, closes it, and expects one answer: a 408 that closes the
// connection (a request that stalled past the server's read timeout).
inline void ExpectRequestTimeout(int fd) {
  const std::string out = ReadUntilClosed(fd);
  close(fd);
  const std::vector<RawResponse> r = SplitResponses(out);
  ASSERT_EQ(r.size(), 1u) << out;
  EXPECT_EQ(r[0].status, 408);
  EXPECT_TRUE(r[0].Closes());
}

// Whether the peer closed the connection: a read gives its end (or a reset), not bytes.
inline bool PeerClosed(int fd) {
  char c;
  const ssize_t n = ::read(fd, &c, 1);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

}  // namespace tandem::testing
