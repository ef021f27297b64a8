// The gateway's OpenAI HTTP front as an HTTP/1.1 server (RFC 9110/9112), over raw sockets against
// real processes: request smuggling through Transfer-Encoding, junk after complete requests,
// the connection limit and its timeouts, HEAD, HTTP/1.0 clients, 100-continue, Host and the
// absolute form, and the framing checks that already held. After each case the gateway must be
// up and a connection opened before it must still be served.
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/raw_http.h"
#include "tests/support/stack.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr int kMaxConnections = 6;
constexpr absl::Duration kReadTimeout = absl::Seconds(3);
constexpr char kChat[] = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":4})";
constexpr char kModels[] = "GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n";
constexpr char kModelsClose[] = "GET /v1/models HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n";

std::string ChatPost(absl::string_view body, absl::string_view extra_headers = "",
                     absl::string_view target = "/v1/chat/completions") {
  return absl::StrCat("POST ", target,
                      " HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n", extra_headers,
                      "Content-Length: ", body.size(), "\r\n\r\n", body);
}

class HttpConformanceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The built-in rules route to both models.
    auto workers = StartWorkers({"qwen", "nemotron"}, {"--synthetic_time_scale=0"});
    ASSERT_TRUE(workers.ok()) << workers.status();
    workers_ = std::move(workers->servers);
    auto gateway = StartGateway(
        workers->entries,
        {"--http_listen=127.0.0.1:0", absl::StrCat("--http_max_connections=", kMaxConnections),
         absl::StrCat("--http_read_timeout=", absl::FormatDuration(kReadTimeout)),
         "--http_idle_timeout=3s"});
    ASSERT_TRUE(gateway.ok()) << gateway.status();
    gateway_ = new Server(std::move(*gateway));
    ASSERT_FALSE(gateway_->http_address.empty());
    ASSERT_TRUE(WaitForReadyModels(gateway_->metrics_address, {"qwen", "nemotron"}));
  }
  static void TearDownTestSuite() {
    delete gateway_;
    gateway_ = nullptr;
    workers_.clear();
  }

  void SetUp() override {
    if (gateway_ == nullptr) GTEST_SKIP() << "the stack did not start";
    // A kept-alive connection served before the hostile bytes, to be served after them too.
    bystander_ = Connect();
    ASSERT_TRUE(SendAll(bystander_, kModels));
    ASSERT_EQ(SplitResponses(ReadResponses(bystander_, 1)).size(), 1u);
  }
  void TearDown() override {
    if (bystander_ >= 0) close(bystander_);
  }

  static int Connect() {
    const int fd = ConnectLoopback(gateway_->http_address);
    EXPECT_GE(fd, 0);
    return fd;
  }

  // `bytes` on a connection of their own, in one write; every answer until the gateway closes.
  static std::vector<RawResponse> Send(const std::string& bytes,
                                       const std::set<size_t>& bodiless = {}) {
    const int fd = Connect();
    EXPECT_TRUE(SendAll(fd, bytes));
    const std::string out = ReadUntilClosed(fd);
    close(fd);
    std::string rest;
    std::vector<RawResponse> r = SplitResponses(out, bodiless, &rest);
    EXPECT_THAT(rest, IsEmpty()) << "bytes the answers' framing does not account for:\n" << out;
    return r;
  }

  // The gateway is alive, the bystander connection is still served, and so is a new one.
  void ExpectUnaffected() {
    ASSERT_EQ(kill(gateway_->process->pid(), 0), 0) << "the gateway is gone";
    if (bystander_ >= 0) {
      ASSERT_TRUE(SendAll(bystander_, kModelsClose));
      const auto r = SplitResponses(ReadUntilClosed(bystander_));
      ASSERT_EQ(r.size(), 1u) << "the bystander connection was not served";
      EXPECT_EQ(r[0].status, 200);
      close(bystander_);
      bystander_ = -1;
    }
    auto answer = HttpPost(gateway_->http_address, "/v1/chat/completions", kChat);
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->status, 200) << answer->body;
  }

  static std::vector<Server> workers_;
  static Server* gateway_;
  int bystander_ = -1;
};

std::vector<Server> HttpConformanceTest::workers_;
Server* HttpConformanceTest::gateway_ = nullptr;

// Item 2: a Transfer-Encoding whose final coding is not chunked has no knowable length: 400 and
// the connection closed, so that the "body" is never read as a request. Another coding than
// chunked: 501.
TEST_F(HttpConformanceTest, TransferEncodingCannotSmuggleARequest) {
  const std::string hidden = kModels;
  for (const char* te : {"gzip", "chunked, identity", "chunked, chunked", "identity"}) {
    const auto r = Send(
        absl::StrCat("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: ", te,
                     "\r\n\r\n", hidden));
    ASSERT_EQ(r.size(), 1u) << te << ": the hidden request was answered";
    EXPECT_EQ(r[0].status, 400) << te;
    EXPECT_TRUE(r[0].Closes()) << te;
  }
  const auto r = Send(absl::StrCat(
      "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
      absl::Hex(strlen(kChat)), "\r\n", kChat, "\r\n0\r\n\r\n", hidden));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, 501);
  EXPECT_TRUE(r[0].Closes());
  // Chunked alone is a body like any other.
  const auto ok = Send(absl::StrCat(
      "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n"
      "Connection: close\r\n\r\n",
      absl::Hex(strlen(kChat)), "\r\n", kChat, "\r\n0\r\n\r\n"));
  ASSERT_EQ(ok.size(), 1u);
  EXPECT_EQ(ok[0].status, 200) << ok[0].body;
  ExpectUnaffected();
}

// Item 3: every complete request is answered, in order, then what cannot be read (400 or 431),
// and the connection closes.
TEST_F(HttpConformanceTest, JunkAfterACompleteRequestIsAnsweredAfterIt) {
  const std::string big_header = absl::StrCat(
      "GET /v1/models HTTP/1.1\r\nHost: gw\r\nX-Big: ", std::string(17 << 10, 'b'), "\r\n\r\n");
  struct Case {
    std::string first, junk;
    int status;
  };
  const size_t log_before = gateway_->process->ReadLog().size();
  for (const Case& c : std::vector<Case>{{kModels, "XXXX\r\n\r\n", 400},
                                         {ChatPost(kChat), "}", 400},
                                         {kModels, big_header, 431},
                                         {ChatPost(kChat), big_header, 431}}) {
    const auto r = Send(c.first + c.junk);
    ASSERT_EQ(r.size(), 2u) << c.junk.substr(0, 16);
    EXPECT_EQ(r[0].status, 200) << r[0].body;
    EXPECT_FALSE(r[0].Closes());
    EXPECT_EQ(r[1].status, c.status);
    EXPECT_TRUE(r[1].Closes());
  }
  // The chat requests before the junk ran to their end: none was taken for a client gone.
  EXPECT_THAT(gateway_->process->ReadLog().substr(log_before), Not(HasSubstr("CANCELLED")));
  // An HTTP/1.0 request without keep-alive ends the connection: nothing after it is read.
  auto r = Send(absl::StrCat("GET /v1/models HTTP/1.0\r\n\r\n", kModels, "XXXX\r\n\r\n"));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, 200);
  EXPECT_TRUE(r[0].Closes());
  // Empty lines between kept-alive requests are not requests.
  r = Send(absl::StrCat(kModels, "\r\n", "\r\n", ChatPost(kChat), "\r\n", kModelsClose));
  ASSERT_EQ(r.size(), 3u);
  for (const auto& each : r) EXPECT_EQ(each.status, 200) << each.body;
  ExpectUnaffected();
}

// Item 4: a full gateway closes the connection idle the longest for a new one; with none idle
// it answers 503 (Retry-After, Connection: close) and counts it.
TEST_F(HttpConformanceTest, AFullGatewayEvictsIdleConnectionsThenRefuses) {
  // Room for exactly kMaxConnections of this test's own, once the gateway has seen the closes
  // (its own time: a close is read like any other bytes).
  close(bystander_);
  bystander_ = -1;
  ASSERT_TRUE(WaitUntil([] {
    auto metrics = HttpGet(gateway_->metrics_address, "/metrics");
    return metrics.ok() &&
           MetricValue(*metrics, "tandem_gateway_http_connections").value_or(-1) == 0;
  }));
  // A connection whose last answer is out, which the gateway only lingers on (for the client to
  // read it before the close), serves no one: it is the first to go.
  // The server marks a connection idle once its answer's write has completed there, which the
  // client can see before (a loaded server ran that handler many round trips later): each step
  // waits for the server's own count of idle connections.
  const auto idle_connections_reach = [](int want) {
    return WaitUntil([want] {
      auto metrics = HttpGet(gateway_->metrics_address, "/metrics");
      return metrics.ok() &&
             MetricValue(*metrics, "tandem_gateway_http_idle_connections").value_or(-1) == want;
    });
  };
  const int lingering = Connect();
  ASSERT_TRUE(SendAll(lingering, kModelsClose));
  ASSERT_EQ(SplitResponses(ReadResponses(lingering, 1)).size(), 1u);
  ASSERT_TRUE(idle_connections_reach(1)) << "the lingering one";
  std::vector<int> idle;
  for (int i = 0; i < kMaxConnections; ++i) {
    idle.push_back(Connect());
    ASSERT_TRUE(SendAll(idle.back(), kModels));
    ASSERT_EQ(SplitResponses(ReadResponses(idle.back(), 1)).size(), 1u) << i;
  }
  ASSERT_TRUE(idle_connections_reach(kMaxConnections));
  // As many new clients again get a slot, each in place of an idle connection. They hold it
  // with a request whose body has not come: a connection that has begun a request is not idle.
  // Each waits for its 100 Continue, which says the server has read the head: until then the
  // server cannot know, and a connection it has not read from counts as idle.
  const std::string head =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
      "Content-Length: 64\r\nExpect: 100-continue\r\n\r\n";
  std::vector<int> busy;
  for (int i = 0; i < kMaxConnections; ++i) {
    busy.push_back(Connect());
    ASSERT_TRUE(SendAll(busy.back(), head));
    std::string interim;
    char buf[256];
    while (interim.find("\r\n\r\n") == std::string::npos) {
      const ssize_t n = ::read(busy.back(), buf, sizeof(buf));
      if (n <= 0) break;
      interim.append(buf, static_cast<size_t>(n));
    }
    ASSERT_THAT(interim, HasSubstr("HTTP/1.1 100 Continue")) << i;
  }
  // Every idle one was closed, the longest idle first (the server marks one idle once its
  // answer's write completed, which the client can see before: the order is the server's).
  for (int i = 0; i < kMaxConnections; ++i) EXPECT_TRUE(PeerClosed(idle[i])) << i;
  close(lingering);
  const int refused = Connect();
  ASSERT_TRUE(SendAll(refused, kModels));
  const auto r = SplitResponses(ReadUntilClosed(refused));
  close(refused);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, 503);
  EXPECT_TRUE(r[0].Closes());
  EXPECT_FALSE(r[0].Header("retry-after").empty());
  EXPECT_THAT(r[0].body, HasSubstr("\"error\""));
  auto metrics = HttpGet(gateway_->metrics_address, "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  auto count = MetricValue(*metrics, "tandem_gateway_http_connections_refused_total");
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_GE(*count, 1);
  // The new clients did get slots: their requests complete.
  ASSERT_TRUE(SendAll(busy[0], "Host: gw\r\nConnection: close\r\n\r\n"));
  const auto served = SplitResponses(ReadUntilClosed(busy[0]));
  ASSERT_EQ(served.size(), 1u);
  // Served; or, where a sanitizer build is slow enough that --http_read_timeout passed while the
  // request was held half-sent, answered 408: either way a connection the server was reading.
  EXPECT_THAT(served[0].status, ::testing::AnyOf(200, 408));
  for (int fd : idle) close(fd);
  for (int fd : busy) close(fd);
  // The slots come back as the gateway notices the closes.
  ASSERT_TRUE(WaitUntil([] {
    auto a = HttpPost(gateway_->http_address, "/v1/chat/completions", kChat);
    return a.ok() && a->status == 200;
  }));
  ExpectUnaffected();
}

// Item 4: a request that stalls gets 408 at --http_read_timeout; a client that drips bytes is
// closed then too; an idle kept-alive connection is closed at --http_idle_timeout.
TEST_F(HttpConformanceTest, StalledAndIdleConnectionsAreClosedAtTheirTimeouts) {
  int fd = Connect();
  ASSERT_TRUE(SendAll(fd, ChatPost(kChat).substr(0, 80)));
  ASSERT_NO_FATAL_FAILURE(ExpectRequestTimeout(fd));
  // Slowloris: a byte at a time, each within the timeout, the whole far beyond it.
  fd = Connect();
  const absl::Time start = absl::Now();
  const std::string slow =
      "GET /v1/models HTTP/1.1\r\nHost: gw\r\nX-Slow: " + std::string(500, 's');
  std::string out;
  for (size_t i = 0; i < slow.size(); ++i) {
    if (!SendAll(fd, slow.substr(i, 1))) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) > 0) break;  // the gateway answered or closed: stop dripping
  }
  out = ReadUntilClosed(fd);
  close(fd);
  EXPECT_LT(absl::Now() - start, kReadTimeout + absl::Seconds(10));
  auto r = SplitResponses(out);
  ASSERT_EQ(r.size(), 1u) << out;
  EXPECT_EQ(r[0].status, 408);
  // Idle after an answer: closed without a word.
  fd = Connect();
  ASSERT_TRUE(SendAll(fd, kModels));
  r = SplitResponses(ReadUntilClosed(fd));
  close(fd);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, 200);
  // The bystander idled all along: it went the same way.
  EXPECT_TRUE(PeerClosed(bystander_));
  close(bystander_);
  bystander_ = -1;
  ExpectUnaffected();
}

// Item 5: HEAD gets headers only; an HTTP/1.0 client's stream is raw, ended by the close;
// 100-continue is answered; HTTP/1.1 needs Host; the absolute form is served.
TEST_F(HttpConformanceTest, HeadHttp10ExpectHostAndAbsoluteForm) {
  auto r = Send(absl::StrCat("HEAD /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n", kModelsClose), {0});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1].status, 200);
  EXPECT_THAT(r[1].body, HasSubstr("qwen"));

  const std::string stream = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":4,)"
                             R"("stream":true})";
  r =
      Send(absl::StrCat("POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\n"
                        "Content-Length: ",
                        stream.size(), "\r\n\r\n", stream));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, 200);
  EXPECT_EQ(r[0].Header("transfer-encoding"), "");
  EXPECT_TRUE(r[0].Closes());
  EXPECT_THAT(r[0].body, HasSubstr("data: [DONE]\n\n"));
  EXPECT_THAT(r[0].body, Not(HasSubstr("\r\n0\r\n")));

  const int fd = Connect();
  ASSERT_TRUE(SendAll(fd, absl::StrCat("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
                                       "Expect: 100-continue\r\nConnection: close\r\n"
                                       "Content-Length: ",
                                       strlen(kChat), "\r\n\r\n")));
  EXPECT_EQ(ReadResponses(fd, 1), "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_TRUE(SendAll(fd, kChat));
  r = SplitResponses(ReadUntilClosed(fd));
  close(fd);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, 200) << r[0].body;

  r = Send("GET /v1/models HTTP/1.1\r\n\r\n");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, 400);
  r = Send(ChatPost(kChat, "Connection: close\r\n",
                    absl::StrCat("http://", gateway_->http_address, "/v1/chat/completions")));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, 200) << r[0].body;
  ExpectUnaffected();
}

constexpr char kNulHeader[] = "GET /v1/models HTTP/1.1\r\nHost: gw\r\nX-A: a\0b\r\n\r\n";

// What held before and must keep holding.
TEST_F(HttpConformanceTest, FramingChecksAndLimitsHold) {
  for (const std::string& bad : std::vector<std::string>{
           "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 4\r\n"
           "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
           "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 4\r\n"
           "Content-Length: 5\r\n\r\nabcde",
           "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: -1\r\n\r\n",
           "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n"
           "fffffffffffffffffffff\r\n",
           std::string(kNulHeader, sizeof(kNulHeader) - 1),
           "GET /v1/models HTTP/1.1\nHost: gw\n\n"}) {
    const auto r = Send(bad);
    ASSERT_EQ(r.size(), 1u) << bad;
    EXPECT_EQ(r[0].status, 400) << bad;
    EXPECT_TRUE(r[0].Closes());
  }
  auto r = Send(absl::StrCat(
      "GET /v1/models HTTP/1.1\r\nHost: gw\r\nX-Big: ", std::string(17 << 10, 'b'), "\r\n\r\n"));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, 431);
  r = Send("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 999999999\r\n\r\n");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, 413);
  // Pipelining: 40 requests in one write, answered in order; an unknown model's 404 in its place.
  std::string many;
  for (int i = 0; i < 40; ++i) {
    absl::StrAppend(&many, i == 17 ? "GET /v1/models/nope HTTP/1.1\r\nHost: gw\r\n\r\n" : kModels);
  }
  absl::StrAppend(&many, kModelsClose);
  r = Send(many);
  ASSERT_EQ(r.size(), 41u);
  for (size_t i = 0; i < r.size(); ++i) EXPECT_EQ(r[i].status, i == 17 ? 404 : 200) << i;
  // SSE framing over chunks.
  const std::string stream = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":4,)"
                             R"("stream":true})";
  r = Send(ChatPost(stream, "Connection: close\r\n"));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].Header("transfer-encoding"), "chunked");
  EXPECT_THAT(r[0].body, HasSubstr("data: [DONE]\n\n"));
  // A client that leaves mid-request or mid-answer costs nothing lasting.
  for (const std::string& part : {ChatPost(stream).substr(0, 120), ChatPost(stream)}) {
    const int fd = Connect();
    ASSERT_TRUE(SendAll(fd, part));
    close(fd);
  }
  ExpectUnaffected();
}

}  // namespace
}  // namespace tandem::testing
