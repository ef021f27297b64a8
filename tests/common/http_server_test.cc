// common/http_server against raw sockets: framing (RFC 9112), pipelining and what follows a
// complete request, the header-phase hook, 100-continue, HEAD, HTTP/1.0 clients, timeouts and
// the connection limit.
#include "common/http_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/raw_http.h"
#include "tests/support/stack.h"

namespace tandem {
namespace {

using ::tandem::testing::ConnectLoopback;
using ::tandem::testing::ExpectRequestTimeout;
using ::tandem::testing::PeerClosed;
using ::tandem::testing::RawResponse;
using ::tandem::testing::ReadResponses;
using ::tandem::testing::ReadUntilClosed;
using ::tandem::testing::SendAll;
using ::tandem::testing::SplitResponses;
using ::tandem::testing::WaitUntil;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpServerOptions options;
    options.max_body_bytes = 1000;
    options.max_header_bytes = 2048;
    Restart(options);
  }

  void Restart(HttpServerOptions options) {
    server_.reset();
    auto server = HttpServer::Start("127.0.0.1:0", std::move(options),
                                    [this](std::shared_ptr<HttpExchange> e) { Handle(e); });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  void Handle(const std::shared_ptr<HttpExchange>& e) {
    handled_.fetch_add(1);
    const HttpRequest& r = e->request();
    if (r.target == "/stream") {
      e->StartStream(HttpResponse{200, {{"content-type", "text/event-stream"}}, ""});
      e->Write("data: a\n\n", [e](bool ok) {
        if (ok) e->EndStream("data: b\n\n");
      });
      return;
    }
    if (r.target == "/flood") {  // writes 1 MiB chunks for as long as they are taken
      e->OnClientGone([this] { gone_.Notify(); });
      e->StartStream(HttpResponse{200, {}, ""});
      Flood(e);
      return;
    }
    if (r.target == "/hang") {
      e->OnClientGone([this] { gone_.Notify(); });
      absl::MutexLock l(&mu_);
      held_.push_back(e);  // answered when the test says
      held_cv_.SignalAll();
      return;
    }
    if (r.target == "/nocontent") {
      return e->Respond(HttpResponse{204, {{"content-length", "99"}}, "dropped"});
    }
    if (r.target == "/twice") {
      e->Respond(HttpResponse{200, {}, "first"});
      e->Respond(HttpResponse{200, {}, "second"});
      return;
    }
    if (r.target == "/evil-header") {
      return e->Respond(HttpResponse{
          200, {{"x-ok", "1"}, {"x-split", "a\r\nset-cookie: b"}, {"bad name", "c"}}, "e"});
    }
    e->Respond(HttpResponse{200,
                            {{"x-echo", std::string(r.Header("x-in"))},
                             {"x-host", std::string(r.Header("host"))},
                             {"x-version", absl::StrCat(r.version)}},
                            absl::StrCat(r.method, " ", r.target, " ", r.body)});
  }

  void Flood(const std::shared_ptr<HttpExchange>& e) {
    e->Write(std::string(1 << 20, 'x'), [this, e](bool ok) {
      if (ok) Flood(e);
    });
  }

  // Waits until `n` requests to /hang are held; returns them.
  std::vector<std::shared_ptr<HttpExchange>> WaitHeld(size_t n) {
    absl::MutexLock l(&mu_);
    while (held_.size() < n) held_cv_.Wait(&mu_);
    return held_;
  }

  int Connect() {
    const int fd = ConnectLoopback(server_->Address());
    EXPECT_GE(fd, 0);
    return fd;
  }

  // Sends `bytes` on a new connection and reads until the server closes it.
  std::string Exchange(const std::string& bytes) {
    const int fd = Connect();
    EXPECT_TRUE(SendAll(fd, bytes));
    std::string out = ReadUntilClosed(fd);
    close(fd);
    return out;
  }

  std::vector<RawResponse> Responses(const std::string& bytes,
                                     const std::set<size_t>& bodiless = {}) {
    const std::string out = Exchange(bytes);
    std::string rest;
    std::vector<RawResponse> r = SplitResponses(out, bodiless, &rest);
    EXPECT_THAT(rest, IsEmpty()) << "unframed bytes after the answers:\n" << out;
    return r;
  }

  std::unique_ptr<HttpServer> server_;
  std::atomic<int> handled_{0};
  absl::Notification gone_;
  absl::Mutex mu_;
  absl::CondVar held_cv_;
  std::vector<std::shared_ptr<HttpExchange>> held_ ABSL_GUARDED_BY(mu_);
};

constexpr char kClose[] = "GET /last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

TEST_F(HttpServerTest, KeepAliveAndPipelinedRequestsAnswerInOrder) {
  const auto r = Responses(
      "POST /a HTTP/1.1\r\nHost: x\r\nX-In: one\r\nContent-Length: 3\r\n\r\nabc"
      "GET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].body, "POST /a abc");
  EXPECT_EQ(r[0].Header("x-echo"), "one");
  EXPECT_FALSE(r[0].Header("date").empty());
  EXPECT_EQ(r[1].body, "GET /b ");
  EXPECT_TRUE(r[1].Closes());
}

TEST_F(HttpServerTest, OversizedAndMalformedRequestsGetTheirStatus) {
  EXPECT_THAT(Exchange("POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n"),
              StartsWith("HTTP/1.1 413"));
  EXPECT_THAT(Exchange(absl::StrCat("GET /a HTTP/1.1\r\nHost: x\r\nX-Big: ", std::string(4000, 'b'),
                                    "\r\n\r\n")),
              StartsWith("HTTP/1.1 431"));
  const std::string bad = Exchange("NOT HTTP AT ALL\r\n\r\n");
  EXPECT_THAT(bad, StartsWith("HTTP/1.1 400"));
  EXPECT_THAT(bad, HasSubstr("\"type\":\"invalid_request_error\""));
  for (const char* held : {
           "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
           "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
           "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3x\r\n\r\nabc",
           "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
           "GET /a HTTP/1.1\nHost: x\n\n",
       }) {
    const auto r = Responses(held);
    ASSERT_EQ(r.size(), 1u) << held;
    EXPECT_EQ(r[0].status, 400) << held;
    EXPECT_TRUE(r[0].Closes()) << held;
  }
  const std::string nul("GET /a HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n", 38);
  EXPECT_THAT(Exchange(nul), StartsWith("HTTP/1.1 400"));
}

TEST_F(HttpServerTest, TransferEncodingMustEndInChunkedAndHoldNothingElse) {
  // RFC 9112 section 6.3: a final coding other than chunked leaves the length unknowable (400),
  // the request's "body" must never be read as a request of its own.
  const std::string hidden = "GET /hidden HTTP/1.1\r\nHost: x\r\n\r\n";
  for (const char* te :
       {"gzip", "chunked, identity", "chunked, chunked", "identity", "chunked;x=1", ", "}) {
    const auto r = Responses(
        absl::StrCat("POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: ", te, "\r\n\r\n", hidden));
    ASSERT_EQ(r.size(), 1u) << te;
    EXPECT_EQ(r[0].status, 400) << te;
    EXPECT_TRUE(r[0].Closes()) << te;
    EXPECT_THAT(r[0].body, Not(HasSubstr("hidden")));
  }
  // Two fields make one list.
  auto r =
      Responses(absl::StrCat("POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
                             "chunked\r\nTransfer-Encoding: gzip\r\n\r\n",
                             hidden));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, 400);
  // A coding this server does not decode (501), the connection closed.
  for (const char* te : {"gzip, chunked", "identity, chunked"}) {
    r = Responses(absl::StrCat("POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: ", te,
                               "\r\n\r\n5\r\nhello\r\n0\r\n\r\n", hidden));
    ASSERT_EQ(r.size(), 1u) << te;
    EXPECT_EQ(r[0].status, 501) << te;
    EXPECT_TRUE(r[0].Closes());
  }
  r =
      Responses(absl::StrCat("POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n"
                             "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, 501);
  // Transfer-Encoding with Content-Length, in either order, and from an HTTP/1.0 client.
  for (const char* req :
       {"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\nContent-Length: 5\r\n\r\nhello",
        "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: gzip\r\n\r\nhello",
        "POST /a HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"}) {
    r = Responses(req);
    ASSERT_EQ(r.size(), 1u) << req;
    EXPECT_EQ(r[0].status, 400) << req;
  }
  // Plain chunked is fine, trailers and all.
  r =
      Responses(absl::StrCat("POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n"
                             "3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nX-Trailer: t\r\n\r\n",
                             kClose));
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].body, "POST /a abcde");
  EXPECT_EQ(handled_.load(), 2);  // only the valid ones reached the handler
}

TEST_F(HttpServerTest, JunkAfterACompleteRequestIsAnsweredAfterIt) {
  const std::string first = "GET /first HTTP/1.1\r\nHost: x\r\n\r\n";
  for (const std::string& junk : {std::string("XXXX\r\n\r\n"), std::string("}"),
                                  absl::StrCat("GET /b HTTP/1.1\r\nHost: x\r\nX-Big: ",
                                               std::string(3000, 'b'), "\r\n\r\n")}) {
    const auto r = Responses(first + junk);
    ASSERT_EQ(r.size(), 2u) << junk.substr(0, 20);
    EXPECT_EQ(r[0].status, 200);
    EXPECT_EQ(r[0].body, "GET /first ");
    EXPECT_FALSE(r[0].Closes());
    EXPECT_EQ(r[1].status, junk.size() > 2048 ? 431 : 400);
    EXPECT_TRUE(r[1].Closes());
  }
  // A request cut short by the client's end: the complete one is answered, then 400.
  const int fd = Connect();
  ASSERT_TRUE(SendAll(fd, first + "GET /second HTT"));
  shutdown(fd, SHUT_WR);
  const auto r = SplitResponses(ReadUntilClosed(fd));
  close(fd);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].status, 200);
  EXPECT_EQ(r[1].status, 400);
}

TEST_F(HttpServerTest, JunkWhileAnAnswerIsPendingWaitsForIt) {
  const int fd = Connect();
  ASSERT_TRUE(SendAll(fd, "GET /hang HTTP/1.1\r\nHost: x\r\n\r\n\r\n}"));
  auto held = WaitHeld(1);
  held[0]->Respond(HttpResponse{200, {}, "late"});
  const auto r = SplitResponses(ReadUntilClosed(fd));
  close(fd);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].body, "late");
  EXPECT_EQ(r[1].status, 400);
  EXPECT_FALSE(gone_.HasBeenNotified());
}

TEST_F(HttpServerTest, EmptyLinesBetweenRequestsAreIgnored) {
  auto r = Responses(absl::StrCat("\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\n\r\n\r\n\n", kClose));
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].status, 200);
  EXPECT_EQ(r[1].status, 200);
  // Nor does one cancel a request in flight.
  const int fd = Connect();
  ASSERT_TRUE(SendAll(fd, "GET /hang HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto held = WaitHeld(1);
  ASSERT_TRUE(SendAll(fd, "\r\n"));
  ASSERT_TRUE(SendAll(fd, kClose));
  held[0]->Respond(HttpResponse{200, {}, "held"});
  r = SplitResponses(ReadUntilClosed(fd));
  close(fd);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].body, "held");
  EXPECT_EQ(r[1].body, "GET /last ");
  EXPECT_FALSE(gone_.HasBeenNotified());
}

TEST_F(HttpServerTest, NothingIsReadAfterARequestThatEndsTheConnection) {
  auto r = Responses("GET /a HTTP/1.0\r\n\r\nGET /b HTTP/1.0\r\n\r\n");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].body, "GET /a ");
  EXPECT_TRUE(r[0].Closes());
  EXPECT_EQ(r[0].Header("x-version"), "10");
  r = Responses("GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nXXXX\r\n\r\n");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, 200);
  // HTTP/1.0 with keep-alive is kept, and says so.
  r = Responses("GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /b HTTP/1.0\r\n\r\n");
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].Header("connection"), "keep-alive");
  EXPECT_TRUE(r[1].Closes());
  EXPECT_EQ(handled_.load(), 4);
}

TEST_F(HttpServerTest, HeadGetsHeadersOnly) {
  auto r = Responses(absl::StrCat("HEAD /a HTTP/1.1\r\nHost: x\r\n\r\n",
                                  "HEAD /stream HTTP/1.1\r\n"
                                  "Host: x\r\n\r\n",
                                  kClose),
                     {0, 1});
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].status, 200);
  EXPECT_EQ(r[0].Header("content-length"), "8");  // "HEAD /a ", what GET would send
  EXPECT_EQ(r[1].status, 200);
  EXPECT_EQ(r[1].Header("content-type"), "text/event-stream");
  EXPECT_EQ(r[2].body, "GET /last ");
}

TEST_F(HttpServerTest, Http10StreamsAreRawAndEndWithTheConnection) {
  const std::string out = Exchange("GET /stream HTTP/1.0\r\n\r\n");
  const auto r = SplitResponses(out);
  ASSERT_EQ(r.size(), 1u) << out;
  EXPECT_EQ(r[0].Header("transfer-encoding"), "");
  EXPECT_EQ(r[0].Header("content-length"), "");
  EXPECT_TRUE(r[0].Closes());
  EXPECT_EQ(r[0].body, "data: a\n\ndata: b\n\n");
  // Even when it asked to be kept alive: nothing else can end the stream.
  EXPECT_EQ(
      SplitResponses(Exchange("GET /stream HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")).at(0).body,
      "data: a\n\ndata: b\n\n");
}

TEST_F(HttpServerTest, ExpectContinueIsAnsweredBeforeTheBody) {
  const int fd = Connect();
  ASSERT_TRUE(SendAll(fd,
                      "POST /a HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                      "Content-Length: 5\r\nConnection: close\r\n\r\n"));
  // The server answers 100 with nothing of the body sent: this read would time out otherwise.
  const std::string interim = ReadResponses(fd, 1);
  EXPECT_EQ(interim, "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_TRUE(SendAll(fd, "hello"));
  const auto r = SplitResponses(ReadUntilClosed(fd));
  close(fd);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].body, "POST /a hello");
  // Another expectation is refused.
  const auto refused = Responses("POST /a HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\n\r\n");
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].status, 417);
  // An HTTP/1.0 client's expectation is ignored; a body sent already gets no 100.
  auto r10 = Responses("POST /a HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi");
  ASSERT_EQ(r10.size(), 1u);
  EXPECT_EQ(r10[0].body, "POST /a hi");
  r10 = Responses(
      "POST /a HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n"
      "Connection: close\r\n\r\nhi");
  ASSERT_EQ(r10.size(), 1u);
  EXPECT_EQ(r10[0].status, 200);
}

TEST_F(HttpServerTest, HostAndTargetForms) {
  auto r = Responses("GET /a HTTP/1.1\r\n\r\n");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, 400);
  r = Responses("GET /a HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, 400);
  r = Responses("GET /a HTTP/1.0\r\n\r\n");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, 200);
  // The absolute form: the path and query are the target, its authority the host.
  r = Responses(
      "POST http://gw.example:8080/v1/chat/completions?x=1 HTTP/1.1\r\nHost: other\r\n"
      "Content-Length: 2\r\nConnection: close\r\n\r\nhi");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].body, "POST /v1/chat/completions?x=1 hi");
  EXPECT_EQ(r[0].Header("x-host"), "gw.example:8080");
  r = Responses("GET HTTPS://h?q HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].body, "GET /?q ");
  for (const char* bad :
       {"GET a/b HTTP/1.1\r\nHost: x\r\n\r\n", "GET http:///a HTTP/1.1\r\nHost: x\r\n\r\n"}) {
    r = Responses(bad);
    ASSERT_EQ(r.size(), 1u) << bad;
    EXPECT_EQ(r[0].status, 400) << bad;
  }
  r = Responses("GET /a HTTP/2.0\r\nHost: x\r\n\r\n");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, 505);
}

TEST_F(HttpServerTest, TheServerFramesTheHandlersAnswers) {
  auto r = Responses(absl::StrCat("GET /nocontent HTTP/1.1\r\nHost: x\r\n\r\n",
                                  "GET /evil-header HTTP/1.1\r\nHost: x\r\n\r\n",
                                  "GET /twice HTTP/1.1\r\nHost: x\r\n\r\n", kClose));
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].status, 204);
  EXPECT_EQ(r[0].Header("content-length"), "");
  EXPECT_EQ(r[1].Header("x-ok"), "1");
  EXPECT_EQ(r[1].Header("x-split"), "");
  EXPECT_EQ(r[1].Header("set-cookie"), "");
  EXPECT_EQ(r[2].body, "first");  // a second answer to one request is dropped
  EXPECT_EQ(r[3].body, "GET /last ");
}

TEST_F(HttpServerTest, StreamsChunks) {
  const auto r = Responses("GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, 200);
  EXPECT_EQ(r[0].Header("transfer-encoding"), "chunked");
  EXPECT_EQ(r[0].body, "data: a\n\ndata: b\n\n");
}

TEST_F(HttpServerTest, AClientThatGoesAwayIsNoticedMidAnswer) {
  const int fd = Connect();
  ASSERT_TRUE(SendAll(fd, "GET /hang HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto held = WaitHeld(1);
  EXPECT_FALSE(gone_.HasBeenNotified());
  close(fd);
  gone_.WaitForNotification();
  // An answer after the client went is dropped, harmlessly.
  held[0]->Respond(HttpResponse{200, {}, "late"});
}

TEST_F(HttpServerTest, HeaderHookAnswersBeforeTheBodyIsRead) {
  HttpServerOptions options;
  options.max_body_bytes = 1 << 20;
  std::atomic<int> hooked{0};
  options.on_headers = [&hooked](const HttpRequest& head) -> std::optional<HttpResponse> {
    hooked.fetch_add(1);
    EXPECT_TRUE(head.body.empty());
    if (head.Header("authorization") == "Bearer ok") return std::nullopt;
    return HttpResponse{401, {{"www-authenticate", "Bearer"}}, "no key for " + head.target};
  };
  Restart(options);
  // Refused: no 100 Continue, the body is never read, the connection closes.
  const int fd = Connect();
  ASSERT_TRUE(SendAll(fd,
                      "POST /a HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                      "Content-Length: 500000\r\n\r\n"));
  const std::string out = ReadUntilClosed(fd);
  close(fd);
  const auto r = SplitResponses(out);
  ASSERT_EQ(r.size(), 1u) << out;
  EXPECT_EQ(r[0].status, 401);
  EXPECT_EQ(r[0].body, "no key for /a");
  EXPECT_TRUE(r[0].Closes());
  EXPECT_EQ(r[0].Header("www-authenticate"), "Bearer");
  // Accepted: on as usual.
  const auto ok = Responses(
      "POST /a HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ok\r\nContent-Length: 2\r\n\r\nhi"
      "GET /b HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ok\r\nConnection: close\r\n\r\n");
  ASSERT_EQ(ok.size(), 2u);
  EXPECT_EQ(ok[0].body, "POST /a hi");
  EXPECT_EQ(hooked.load(), 3);
  EXPECT_EQ(handled_.load(), 2);
  // A pipelined request's hook answers in its turn, after the answer before it.
  const auto mixed = Responses(
      "GET /a HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ok\r\n\r\n"
      "POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
      "GET /c HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ok\r\n\r\n");
  ASSERT_EQ(mixed.size(), 2u);
  EXPECT_EQ(mixed[0].status, 200);
  EXPECT_EQ(mixed[1].status, 401);
}

TEST_F(HttpServerTest, ReadTimeoutAnswers408MidRequestAndIdleConnectionsClose) {
  HttpServerOptions options;
  options.read_timeout = absl::Milliseconds(300);
  options.idle_timeout = absl::Milliseconds(300);
  Restart(options);
  // Part of a request, then nothing (a slowloris): 408, closed.
  int fd = Connect();
  ASSERT_TRUE(SendAll(fd, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc"));
  ASSERT_NO_FATAL_FAILURE(ExpectRequestTimeout(fd));
  // Idle after an answer, or from the start: closed without a word.
  fd = Connect();
  ASSERT_TRUE(SendAll(fd, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"));
  const std::string out = ReadUntilClosed(fd);
  close(fd);
  auto r = SplitResponses(out);
  ASSERT_EQ(r.size(), 1u) << out;
  EXPECT_EQ(r[0].status, 200);
  fd = Connect();
  EXPECT_EQ(ReadUntilClosed(fd), "");
  close(fd);
}

TEST_F(HttpServerTest, AClientThatStopsReadingIsCutOffAtTheWriteTimeout) {
  HttpServerOptions options;
  options.write_timeout = absl::Milliseconds(300);
  Restart(options);
  // A stream the client never reads: once the socket buffers are full no write progresses, and
  // --http_write_timeout later the server gives up on the client and tells the handler.
  const int fd = Connect();
  ASSERT_TRUE(SendAll(fd, "GET /flood HTTP/1.1\r\nHost: x\r\n\r\n"));
  gone_.WaitForNotification();
  const std::string got = ReadUntilClosed(fd);  // what was buffered, then the end
  close(fd);
  EXPECT_THAT(got, StartsWith("HTTP/1.1 200"));
  // The server serves on.
  const auto r = Responses(kClose);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, 200);
}

TEST_F(HttpServerTest, AFullServerEvictsTheOldestIdleConnectionThenRefuses) {
  HttpServerOptions options;
  options.max_connections = 2;
  std::atomic<int> refused{0};
  options.on_connection_refused = [&refused] { refused.fetch_add(1); };
  Restart(options);
  const std::string get = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n";
  // Two kept-alive connections, idle after their answers, a before b. The server marks one idle
  // after its answer's write completes, which the client can see before (it has the bytes).
  const int a = Connect(), b = Connect();
  int answered = 0;
  for (int fd : {a, b}) {
    ASSERT_TRUE(SendAll(fd, get));
    ASSERT_EQ(SplitResponses(ReadResponses(fd, 1)).size(), 1u);
    ++answered;
    ASSERT_TRUE(WaitUntil([&] { return server_->IdleConnections() == answered; }));
  }
  // A third takes the place of the oldest idle one (a), which is closed.
  const int c = Connect();
  ASSERT_TRUE(SendAll(c, "GET /hang HTTP/1.1\r\nHost: x\r\n\r\n"));
  WaitHeld(1);
  EXPECT_TRUE(PeerClosed(a));
  // b still works, and then holds a request too: no connection is idle.
  ASSERT_TRUE(SendAll(b, "GET /hang HTTP/1.1\r\nHost: x\r\n\r\n"));
  WaitHeld(2);
  const int d = Connect();
  ASSERT_TRUE(SendAll(d, get));
  const auto r = SplitResponses(ReadUntilClosed(d));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, 503);
  EXPECT_TRUE(r[0].Closes());
  EXPECT_EQ(r[0].Header("retry-after"), "1");
  EXPECT_THAT(r[0].body, HasSubstr("too many connections"));
  EXPECT_EQ(refused.load(), 1);
  EXPECT_EQ(handled_.load(), 4);  // d's request never reached the handler
  for (const auto& e : WaitHeld(2)) e->Respond(HttpResponse{200, {}, "done"});
  EXPECT_EQ(SplitResponses(ReadResponses(b, 1)).at(0).body, "done");
  EXPECT_EQ(SplitResponses(ReadResponses(c, 1)).at(0).body, "done");
  for (int fd : {a, b, c, d}) close(fd);
}

TEST(HttpServerOptionsTest, RefusesBadOptions) {
  HttpServerOptions options;
  options.idle_timeout = absl::ZeroDuration();
  EXPECT_FALSE(HttpServer::Start("127.0.0.1:0", options, [](auto) {}).ok());
}

}  // namespace
}  // namespace tandem
