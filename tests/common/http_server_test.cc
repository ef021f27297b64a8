#include "common/http_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/stack.h"

namespace tandem {
namespace {

using ::tandem::testing::ConnectLoopback;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpServerOptions options;
    options.max_body_bytes = 1000;
    options.max_header_bytes = 2048;
    auto server = HttpServer::Start("127.0.0.1:0", options,
                                    [this](std::shared_ptr<HttpExchange> e) { Handle(e); });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }

  void Handle(const std::shared_ptr<HttpExchange>& e) {
    const HttpRequest& r = e->request();
    if (r.target == "/stream") {
      e->StartStream(HttpResponse{200, {{"content-type", "text/event-stream"}}, ""});
      e->Write("data: a\n\n", [e](bool ok) {
        if (ok) e->EndStream("data: b\n\n");
      });
      return;
    }
    if (r.target == "/hang") {
      e->OnClientGone([this] { gone_.Notify(); });
      absl::MutexLock l(&mu_);
      held_ = e;  // answered never: the client goes first
      arrived_.Notify();
      return;
    }
    e->Respond(HttpResponse{200,
                            {{"x-echo", std::string(r.Header("x-in"))}},
                            absl::StrCat(r.method, " ", r.target, " ", r.body)});
  }

  // Sends `bytes` on a new connection and reads until the server closes it or `until` shows.
  std::string Exchange(const std::string& bytes, const std::string& until = "") {
    const int fd = ConnectLoopback(server_->Address());
    EXPECT_GE(fd, 0);
    EXPECT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    std::string out;
    char buf[4096];
    while (until.empty() || out.find(until) == std::string::npos) {
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n <= 0) break;
      out.append(buf, n);
    }
    close(fd);
    return out;
  }

  std::unique_ptr<HttpServer> server_;
  absl::Notification arrived_;
  absl::Notification gone_;
  absl::Mutex mu_;
  std::shared_ptr<HttpExchange> held_;
};

TEST_F(HttpServerTest, KeepAliveAndPipelinedRequestsAnswerInOrder) {
  const std::string out = Exchange(
      "POST /a HTTP/1.1\r\nHost: x\r\nX-In: one\r\nContent-Length: 3\r\n\r\nabc"
      "GET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const size_t a = out.find("POST /a abc");
  const size_t b = out.find("GET /b ");
  ASSERT_NE(a, std::string::npos) << out;
  ASSERT_NE(b, std::string::npos) << out;
  EXPECT_LT(a, b);
  EXPECT_THAT(out, HasSubstr("x-echo: one"));
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
}

TEST_F(HttpServerTest, StreamsChunks) {
  const std::string out = Exchange("GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(out, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(out, HasSubstr("Transfer-Encoding: chunked"));
  EXPECT_THAT(out, HasSubstr("data: a\n\n"));
  EXPECT_THAT(out, HasSubstr("data: b\n\n\r\n0\r\n\r\n"));
}

TEST_F(HttpServerTest, AClientThatGoesAwayIsNoticedMidAnswer) {
  const int fd = ConnectLoopback(server_->Address());
  ASSERT_GE(fd, 0);
  const std::string req = "GET /hang HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
  arrived_.WaitForNotification();
  EXPECT_FALSE(gone_.HasBeenNotified());
  close(fd);
  gone_.WaitForNotification();
  // An answer after the client went is dropped, harmlessly.
  absl::MutexLock l(&mu_);
  held_->Respond(HttpResponse{200, {}, "late"});
}

}  // namespace
}  // namespace tandem
