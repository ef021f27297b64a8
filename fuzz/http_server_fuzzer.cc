// common/http_server fed whole raw HTTP/1.x byte streams (pipelined requests, junk, partial
// requests) over a loopback connection, written in pieces split where the input's tail says, then
// the client's end. The server runs in-process under ASan and UBSan; besides not crashing it must
// hand the handler only requests whose framing is unambiguous, and send nothing after an answer
// that said Connection: close.
#include <fuzzer/FuzzedDataProvider.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/http_server.h"
#include "spdlog/spdlog.h"
#include "tests/support/raw_http.h"

namespace {

using tandem::HttpExchange;
using tandem::HttpRequest;
using tandem::HttpResponse;
using tandem::HttpServer;
using tandem::HttpServerOptions;

constexpr int64_t kMaxBody = 4096;

void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "http_server_fuzzer: invariant broken: %s\n", what);
    abort();
  }
}

// What the handler may see: a body within the limit, a target in one of its forms, and never a
// Transfer-Encoding other than chunked alone (anything else must have been refused).
void CheckRequest(const HttpRequest& r) {
  Check(r.version == 10 || r.version == 11, "version");
  Check(r.body.size() <= static_cast<size_t>(kMaxBody), "body over the limit");
  Check(absl::StartsWith(r.target, "/") || r.target == "*" || r.method == "CONNECT", "target form");
  int hosts = 0;
  for (const auto& [k, v] : r.headers) {
    if (k == "host") ++hosts;
    if (k != "transfer-encoding") continue;
    // A list whose one element is chunked (empty elements are allowed: RFC 9110 section 5.6.1).
    std::vector<absl::string_view> codings;
    for (absl::string_view c : absl::StrSplit(v, ',')) {
      c = absl::StripAsciiWhitespace(c);
      if (!c.empty()) codings.push_back(c);
    }
    Check(codings.size() == 1 && absl::EqualsIgnoreCase(codings[0], "chunked"), "transfer coding");
  }
  Check(r.version == 10 || hosts == 1, "HTTP/1.1 without exactly one Host");
}

void Handle(const std::shared_ptr<HttpExchange>& e) {
  const HttpRequest& r = e->request();
  CheckRequest(r);
  if (absl::StartsWith(r.target, "/stream")) {
    e->StartStream(HttpResponse{200, {{"content-type", "text/event-stream"}}, ""});
    e->Write("data: a\n\n", [e](bool ok) {
      if (ok) e->EndStream("data: b\n\n");
    });
    return;
  }
  if (absl::StartsWith(r.target, "/empty")) return e->Respond(HttpResponse{204, {}, ""});
  if (absl::StartsWith(r.target, "/close")) {
    return e->Respond(HttpResponse{200, {{"connection", "close"}}, "bye"});
  }
  e->Respond(HttpResponse{200, {{"content-type", "text/plain"}}, absl::StrCat(r.body.size())});
}

HttpServer* Server() {
  static HttpServer* server = [] {
    spdlog::set_level(spdlog::level::off);
    HttpServerOptions options;
    options.threads = 1;
    options.max_header_bytes = 1024;
    options.max_body_bytes = kMaxBody;
    // Every input ends with the client's end, so no timeout is waited for; these only bound a
    // bug that would make the server wait anyway (the fuzzer's -timeout then reports it).
    options.read_timeout = absl::Seconds(20);
    options.idle_timeout = absl::Seconds(20);
    options.on_headers = [](const HttpRequest& head) -> std::optional<HttpResponse> {
      CheckRequest(head);
      Check(head.body.empty(), "a body in the header phase");
      if (!head.Header("x-reject").empty()) return HttpResponse{401, {}, "no"};
      return std::nullopt;
    };
    auto s = HttpServer::Start("127.0.0.1:0", options, Handle);
    if (!s.ok()) {
      fprintf(stderr, "cannot start the server: %s\n", s.status().ToString().c_str());
      abort();
    }
    return s->release();  // kept for the process's life
  }();
  return server;
}

int Connect(const std::string& host_port) {
  const int port = std::atoi(host_port.substr(host_port.rfind(':') + 1).c_str());
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  Check(fd >= 0, "socket");
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // pieces leave as pieces
  const timeval patience{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof(patience));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  Check(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0, "connect");
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (64 << 10)) return 0;
  FuzzedDataProvider in(data, size);
  // The split points come from the input's tail (FuzzedDataProvider reads integers from the
  // end), so a seed that is plain HTTP is sent whole.
  const size_t pieces = in.ConsumeIntegralInRange<size_t>(0, 6);
  std::vector<size_t> cuts;
  for (size_t i = 0; i < pieces; ++i) cuts.push_back(in.ConsumeIntegral<uint16_t>());
  const std::string stream = in.ConsumeRemainingBytesAsString();

  const int fd = Connect(Server()->Address());
  size_t sent = 0;
  for (size_t cut : cuts) {
    cut = stream.empty() ? 0 : cut % (stream.size() + 1);
    if (cut <= sent) continue;
    if (!tandem::testing::SendAll(fd, absl::string_view(stream).substr(sent, cut - sent))) break;
    sent = cut;
  }
  if (sent < stream.size()) tandem::testing::SendAll(fd, absl::string_view(stream).substr(sent));
  shutdown(fd, SHUT_WR);
  const std::string out = tandem::testing::ReadUntilClosed(fd);
  close(fd);

  // HEAD answers have no body; which ones they are is not known here, so only answers up to the
  // first HEAD-looking one are framed strictly: each a valid status, none after a closing one.
  if (absl::StrContains(stream, "HEAD")) return 0;
  std::string rest;
  const auto responses = tandem::testing::SplitResponses(out, {}, &rest);
  for (size_t i = 0; i < responses.size(); ++i) {
    Check(responses[i].status >= 100 && responses[i].status <= 599, "status");
    if (responses[i].Closes()) {
      Check(i + 1 == responses.size() && rest.empty(), "bytes after Connection: close");
    }
  }
  return 0;
}
