// The /metrics server: what it answers, keep-alive, that a stalled client holds only its own
// connection and only until the request timeout, that it stops at once, and HTTPS with client
// certificates and rotation, checked with the gateway's own scrape client (libcurl).
#include "common/metrics_server.h"

#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/http_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "tests/support/pki.h"
#include "tests/support/stack.h"
#include "tests/support/temp_path.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;
using testing::HttpGet;
using ::testing::Not;
using testing::ReplaceFileAtomically;
using ::testing::StartsWith;
using testing::TempPath;
using testing::TestCa;
using testing::TestCert;
using testing::WaitUntil;

std::shared_ptr<prometheus::Registry> RegistryWithACounter() {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter()
      .Name("tandem_test_things_total")
      .Help("Things.")
      .Register(*registry)
      .Add({})
      .Increment(3);
  return registry;
}

std::unique_ptr<MetricsServer> StartOrDie(MetricsServerOptions options = {}) {
  auto server = MetricsServer::Start("127.0.0.1:0", RegistryWithACounter(), std::move(options));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

int Connect(const std::string& address) { return testing::ConnectLoopback(address); }

// Sends all of `request`.
bool Send(int fd, const std::string& request) {
  return ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
         static_cast<ssize_t>(request.size());
}

// Sends `request` and returns everything the server sends until it closes the connection.
std::string Exchange(const std::string& address, const std::string& request) {
  const int fd = Connect(address);
  if (fd < 0) return "connect failed";
  if (!Send(fd, request)) {
    ::close(fd);
    return "send failed";
  }
  std::string response;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) response.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return response;
}

TEST(MetricsServerTest, ServesTheRegistryAndRefusesEverythingElse) {
  auto server = StartOrDie();
  ASSERT_NE(server, nullptr);
  EXPECT_STREQ(server->Scheme(), "http");
  auto body = HttpGet(server->Address(), "/metrics?x=1");
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_THAT(*body, HasSubstr("tandem_test_things_total 3"));

  const std::string head =
      Exchange(server->Address(), "HEAD /metrics HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(head, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(head, HasSubstr("Content-Type: text/plain; version=0.0.4"));
  EXPECT_EQ(head.find("tandem_test_things_total"), std::string::npos) << "HEAD has no body";
  EXPECT_THAT(Exchange(server->Address(), "GET /other HTTP/1.1\r\nconnection: Close\r\n\r\n"),
              StartsWith("HTTP/1.1 404 "));
  EXPECT_THAT(Exchange(server->Address(), "POST /metrics HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 405 "));
  EXPECT_THAT(Exchange(server->Address(), "garbage\r\n\r\n"), StartsWith("HTTP/1.1 400 "));
  EXPECT_THAT(Exchange(server->Address(), "GET /metrics SPDY/3\r\n\r\n"),
              StartsWith("HTTP/1.1 400 "));
  EXPECT_THAT(Exchange(server->Address(), "GET\r\n\r\n"), StartsWith("HTTP/1.1 400 "));
  // Lines may end in a bare LF.
  EXPECT_THAT(Exchange(server->Address(), "GET /metrics HTTP/1.0\n\n"),
              StartsWith("HTTP/1.1 200 OK"));
  EXPECT_THAT(Exchange(server->Address(),
                       absl::StrCat("GET /metrics HTTP/1.1\r\nX: ", std::string(20000, 'a'))),
              StartsWith("HTTP/1.1 431 "));
  // Still serving after all of that.
  EXPECT_TRUE(HttpGet(server->Address(), "/metrics").ok());
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(MetricsServerTest, KeepAliveAnswersPipelinedRequestsOnOneConnection) {
  auto server = StartOrDie();
  ASSERT_NE(server, nullptr);
  const std::string answers = Exchange(
      server->Address(),
      "GET /metrics HTTP/1.1\r\n\r\nHEAD /metrics HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
      "GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n");
  // Three answers on the one connection, then the server closes it as the last one asked.
  EXPECT_EQ(Count(answers, "HTTP/1.1 200 OK"), 3u) << answers;
  EXPECT_EQ(Count(answers, "Connection: keep-alive"), 2u) << answers;
  EXPECT_EQ(Count(answers, "tandem_test_things_total 3"), 2u) << answers;
}

// A registry whose Nth collection (1-based) waits until the test releases it, and that says when
// that collection has begun: it stops the server's loop at a known point.
class GatedRegistry : public prometheus::Registry {
 public:
  explicit GatedRegistry(std::vector<int> gated) : gated_(std::move(gated)) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    {
      absl::MutexLock l(&mu_);
      const int n = ++calls_;
      cv_.SignalAll();
      if (std::find(gated_.begin(), gated_.end(), n) != gated_.end()) {
        while (released_ < n) cv_.Wait(&mu_);
      }
    }
    return Registry::Collect();
  }
  // Waits until collection `n` has begun.
  void AwaitCall(int n) const {
    absl::MutexLock l(&mu_);
    while (calls_ < n) cv_.Wait(&mu_);
  }
  // Lets collections up to `n` finish.
  void Release(int n) {
    absl::MutexLock l(&mu_);
    released_ = n;
    cv_.SignalAll();
  }

 private:
  const std::vector<int> gated_;
  mutable absl::Mutex mu_;
  mutable absl::CondVar cv_;
  mutable int calls_ ABSL_GUARDED_BY(mu_) = 0;
  int released_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(MetricsServerTest, APipeliningClientTakesTurnsWithTheOthers) {
  // Collections 1 and 4 wait for the test.
  auto registry = std::make_shared<GatedRegistry>(std::vector<int>{1, 4});
  auto server = MetricsServer::Start("127.0.0.1:0", registry);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->Address();
  // A sends three requests at once; its first answer holds the loop in collection 1.
  const int a = Connect(address);
  ASSERT_GE(a, 0);
  ASSERT_TRUE(Send(a,
                   "GET /metrics HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\n\r\n"
                   "GET /metrics HTTP/1.1\r\n\r\n"));
  registry->AwaitCall(1);
  // B arrives meanwhile.
  const int b = Connect(address);
  ASSERT_GE(b, 0);
  const timeval patience{5, 0};
  setsockopt(b, SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof(patience));
  ASSERT_TRUE(Send(b, "GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n"));
  registry->Release(3);
  // B is answered before A's third request (collection 4, still held). A server that answered
  // one connection's pipelined requests all in a row would answer A's three first and hold B
  // behind collection 4 until B's read gives up.
  std::string b_answer;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(b, buf, sizeof(buf), 0)) > 0) b_answer.append(buf, static_cast<size_t>(n));
  EXPECT_THAT(b_answer, StartsWith("HTTP/1.1 200 OK"));
  registry->Release(4);
  std::string a_answers;
  while (Count(a_answers, "HTTP/1.1 200 OK") < 3 && (n = ::recv(a, buf, sizeof(buf), 0)) > 0) {
    a_answers.append(buf, static_cast<size_t>(n));
  }
  EXPECT_EQ(Count(a_answers, "HTTP/1.1 200 OK"), 3u);
  ::close(a);
  ::close(b);
}

TEST(MetricsServerTest, HeadAnswersSayTheLengthButSendNoBody) {
  auto server = StartOrDie();
  ASSERT_NE(server, nullptr);
  // On a kept connection a body after HEAD would be read as the start of the next answer.
  const std::string answers = Exchange(server->Address(),
                                       "HEAD /other HTTP/1.1\r\n\r\nHEAD /metrics HTTP/1.1\r\n\r\n"
                                       "GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n");
  const size_t first_end = answers.find("\r\n\r\n");
  ASSERT_NE(first_end, std::string::npos) << answers;
  EXPECT_THAT(answers, StartsWith("HTTP/1.1 404 "));
  EXPECT_THAT(answers.substr(0, first_end), HasSubstr("Content-Length: 24"));
  const std::string rest = answers.substr(first_end + 4);
  EXPECT_THAT(rest, StartsWith("HTTP/1.1 200 OK")) << answers;
  const size_t second_end = rest.find("\r\n\r\n");
  ASSERT_NE(second_end, std::string::npos);
  EXPECT_THAT(rest.substr(0, second_end), Not(HasSubstr("Content-Length: 0")));
  EXPECT_THAT(rest.substr(second_end + 4), StartsWith("HTTP/1.1 200 OK")) << answers;
  EXPECT_EQ(Count(answers, "tandem_test_things_total 3"), 1u) << answers;
}

TEST(MetricsServerTest, ARequestWithABodyClosesTheConnection) {
  auto server = StartOrDie();
  ASSERT_NE(server, nullptr);
  // The body is not taken for a second request: one answer, then the server closes.
  const std::string answers =
      Exchange(server->Address(),
               "GET /metrics HTTP/1.1\r\nContent-Length: 24\r\n\r\nGET /x HTTP/1.1\r\n\r\n");
  EXPECT_EQ(Count(answers, "HTTP/1.1 "), 1u) << answers;
  EXPECT_THAT(answers, HasSubstr("Connection: close"));
}

// A connection that has had one kept-alive request answered, so it is idle now; -1 on failure.
int ConnectAndScrapeOnce(const std::string& address) {
  const int fd = Connect(address);
  if (fd < 0 || !Send(fd, "GET /metrics HTTP/1.1\r\n\r\n")) return -1;
  std::string got;
  char buf[4096];
  while (got.find("tandem_test_things_total 3\n") == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      ::close(fd);
      return -1;
    }
    got.append(buf, static_cast<size_t>(n));
  }
  return fd;
}

TEST(MetricsServerTest, AnIdleKeptAliveConnectionIsClosedAfterTheIdleTimeout) {
  MetricsServerOptions options;
  options.idle_timeout = absl::Milliseconds(200);
  auto server = StartOrDie(options);
  ASSERT_NE(server, nullptr);
  const int fd = ConnectAndScrapeOnce(server->Address());
  ASSERT_GE(fd, 0);
  const absl::Time answered = absl::Now();
  char c;
  EXPECT_EQ(::recv(fd, &c, 1, 0), 0) << "closed by the server";
  // The idle timeout, not the 5 s request timeout.
  EXPECT_GE(absl::Now() - answered, absl::Milliseconds(100));
  EXPECT_LT(absl::Now() - answered, absl::Seconds(4));
  ::close(fd);
}

TEST(MetricsServerTest, AFullServerGivesAnIdleConnectionsPlaceToANewOne) {
  MetricsServerOptions options;
  options.max_connections = 1;
  auto server = StartOrDie(options);
  ASSERT_NE(server, nullptr);
  const int kept = ConnectAndScrapeOnce(server->Address());
  ASSERT_GE(kept, 0);
  // `kept` is idle and holds the only place; a new client gets it at once (not after the 60 s
  // idle timeout), and `kept` is closed.
  EXPECT_TRUE(HttpGet(server->Address(), "/metrics").ok());
  char c;
  EXPECT_EQ(::recv(kept, &c, 1, 0), 0);
  ::close(kept);
}

TEST(MetricsServerTest, AStalledClientHoldsOnlyItsOwnConnection) {
  MetricsServerOptions options;
  options.request_timeout = absl::Minutes(10);
  auto server = StartOrDie(options);
  ASSERT_NE(server, nullptr);
  // It never sends a byte; a server that served connections one at a time would serve nothing
  // else for ten minutes.
  const int stalled = Connect(server->Address());
  ASSERT_GE(stalled, 0);
  for (int i = 0; i < 5; ++i) {
    auto body = HttpGet(server->Address(), "/metrics");
    ASSERT_TRUE(body.ok()) << body.status();
    EXPECT_THAT(*body, HasSubstr("tandem_test_things_total"));
  }
  ::close(stalled);
}

TEST(MetricsServerTest, AStalledClientIsCutOffAtTheRequestTimeout) {
  // One place, which the stalled client holds (it is mid-request, not idle).
  MetricsServerOptions options;
  options.max_connections = 1;
  options.request_timeout = absl::Milliseconds(200);
  auto server = StartOrDie(options);
  ASSERT_NE(server, nullptr);
  const int stalled = Connect(server->Address());
  ASSERT_GE(stalled, 0);
  ASSERT_TRUE(Send(stalled, "GET /metrics HTTP/1.1\r\n"));
  // The server closes it without an answer (the read sees the end of the stream), and not
  // before the timeout...
  const absl::Time sent = absl::Now();
  char c;
  EXPECT_EQ(::recv(stalled, &c, 1, 0), 0);
  EXPECT_GE(absl::Now() - sent, absl::Milliseconds(100));
  ::close(stalled);
  // ...and its place goes to the next client.
  EXPECT_TRUE(HttpGet(server->Address(), "/metrics").ok());
}

TEST(MetricsServerTest, RefusesBadOptions) {
  for (int connections : {0, -1, 10001}) {
    MetricsServerOptions options;
    options.max_connections = connections;
    auto server = MetricsServer::Start("127.0.0.1:0", RegistryWithACounter(), options);
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << connections;
  }
  for (absl::Duration timeout : {absl::ZeroDuration(), absl::InfiniteDuration()}) {
    MetricsServerOptions request;
    request.request_timeout = timeout;
    EXPECT_EQ(MetricsServer::Start("127.0.0.1:0", RegistryWithACounter(), request).status().code(),
              absl::StatusCode::kInvalidArgument)
        << timeout;
    MetricsServerOptions idle;
    idle.idle_timeout = timeout;
    EXPECT_EQ(MetricsServer::Start("127.0.0.1:0", RegistryWithACounter(), idle).status().code(),
              absl::StatusCode::kInvalidArgument)
        << timeout;
  }
  MetricsServerOptions missing;
  missing.tls.cert = TempPath("absent.crt");
  missing.tls.key = TempPath("absent.key");
  auto server = MetricsServer::Start("127.0.0.1:0", RegistryWithACounter(), missing);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(server.status().message(), HasSubstr("absent.crt"));
}

class MetricsTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<TestCert> certs, rogue;
    ASSERT_NO_FATAL_FAILURE(MakeTestPki("metrics", {"server", "scraper"}, &ca_, &certs));
    ASSERT_NO_FATAL_FAILURE(MakeTestPki("metrics-other", {"rogue"}, &other_ca_, &rogue));
    server_ = certs[0];
    client_ = certs[1];
    rogue_ = rogue[0];
  }

  // GET https://ADDRESS/metrics trusting `ca`, showing `cert` when given.
  static absl::StatusOr<std::string> Get(const std::string& address, const std::string& ca,
                                         const TestCert* cert = nullptr,
                                         const std::string& server_name = "") {
    TlsFiles tls;
    tls.ca = ca;
    if (cert != nullptr) {
      tls.cert = cert->cert;
      tls.key = cert->key;
    }
    return CurlHttpClient(tls, server_name)
        .Get(absl::StrCat("https://", address, "/metrics"), absl::Seconds(10));
  }

  // A TLS server reading copies of server_'s files (which the test may then replace), re-read
  // every second; `name` keeps each test's copies apart.
  std::unique_ptr<MetricsServer> StartFromCopies(const std::string& name, std::string* cert,
                                                 std::string* key) {
    *cert = TempPath(name + ".crt");
    *key = TempPath(name + ".key");
    if (!ReplaceFileAtomically(server_.cert, *cert).ok() ||
        !ReplaceFileAtomically(server_.key, *key).ok()) {
      ADD_FAILURE() << "cannot copy the server's files";
      return nullptr;
    }
    MetricsServerOptions options;
    options.tls = {*cert, *key, "", absl::Seconds(1)};
    return StartOrDie(options);
  }

  TestCa ca_, other_ca_;
  TestCert server_, client_, rogue_;
};

TEST_F(MetricsTlsTest, HttpsWithClientCertificatesSignedByItsCa) {
  MetricsServerOptions options;
  options.tls = {server_.cert, server_.key, ca_.ca_cert()};
  auto server = StartOrDie(options);
  ASSERT_NE(server, nullptr);
  EXPECT_STREQ(server->Scheme(), "https");

  auto body = Get(server->Address(), ca_.ca_cert(), &client_);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_THAT(*body, HasSubstr("tandem_test_things_total 3"));
  {
    // One client scrapes again and again on its kept connection, as the gateway does.
    TlsFiles tls{client_.cert, client_.key, ca_.ca_cert()};
    CurlHttpClient http(tls);
    for (int i = 0; i < 5; ++i) {
      auto again =
          http.Get(absl::StrCat("https://", server->Address(), "/metrics"), absl::Seconds(10));
      ASSERT_TRUE(again.ok()) << i << ": " << again.status();
      EXPECT_THAT(*again, HasSubstr("tandem_test_things_total 3"));
    }
  }
  // No client certificate, or one from another CA: refused in the handshake.
  EXPECT_FALSE(Get(server->Address(), ca_.ca_cert()).ok());
  EXPECT_FALSE(Get(server->Address(), ca_.ca_cert(), &rogue_).ok());
  // A client that trusts another CA refuses the server; plain HTTP gets nothing.
  EXPECT_FALSE(Get(server->Address(), other_ca_.ca_cert(), &client_).ok());
  EXPECT_FALSE(HttpGet(server->Address(), "/metrics").ok());
  // The certificate is checked against the name the client expects, not only the address.
  EXPECT_TRUE(Get(server->Address(), ca_.ca_cert(), &client_, "localhost").ok());
  auto wrong_name = Get(server->Address(), ca_.ca_cert(), &client_, "wrong.example");
  EXPECT_FALSE(wrong_name.ok());
  // None of the refusals broke anything.
  EXPECT_TRUE(Get(server->Address(), ca_.ca_cert(), &client_).ok());
}

TEST_F(MetricsTlsTest, StopsAtOnceWhileAConnectionWaitsForItsRequest) {
  MetricsServerOptions options;
  options.request_timeout = absl::Minutes(10);
  options.tls = {server_.cert, server_.key, ""};
  auto server = StartOrDie(options);
  ASSERT_NE(server, nullptr);
  const int fd = Connect(server->Address());
  ASSERT_GE(fd, 0);
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()),
                                                        SSL_CTX_free);
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), SSL_free);
  ASSERT_EQ(SSL_set_fd(ssl.get(), fd), 1);
  // A finished handshake means the server holds this connection, waiting for a request that
  // never comes.
  ASSERT_EQ(SSL_connect(ssl.get()), 1);
  const absl::Time start = absl::Now();
  server.reset();  // ten minutes if a connection being served ignored the stop
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  char c;
  EXPECT_LE(SSL_read(ssl.get(), &c, 1), 0) << "the server closed the connection";
  ::close(fd);
}

TEST_F(MetricsTlsTest, WithoutAClientCaAnyClientIsServed) {
  MetricsServerOptions options;
  options.tls = {server_.cert, server_.key, ""};
  auto server = StartOrDie(options);
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(Get(server->Address(), ca_.ca_cert()).ok());
  EXPECT_TRUE(Get(server->Address(), ca_.ca_cert(), &rogue_).ok());
}

TEST_F(MetricsTlsTest, RotatedCertificatesApplyToNewConnections) {
  std::string cert, key;
  auto server = StartFromCopies("metrics-served", &cert, &key);
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(Get(server->Address(), ca_.ca_cert()).ok());
  ASSERT_FALSE(Get(server->Address(), other_ca_.ca_cert()).ok());

  // Key first, as the gRPC port's watcher wants (the half-rotated moment is the next test's).
  auto next = other_ca_.Issue("server-next");
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_TRUE(ReplaceFileAtomically(next->key, key).ok());
  ASSERT_TRUE(ReplaceFileAtomically(next->cert, cert).ok());
  EXPECT_TRUE(WaitUntil([&] { return Get(server->Address(), other_ca_.ca_cert()).ok(); }));
  EXPECT_FALSE(Get(server->Address(), ca_.ca_cert()).ok());
}

TEST_F(MetricsTlsTest, AHalfRotatedPairKeepsServingTheOldCertificate) {
  std::string cert, key;
  auto server = StartFromCopies("metrics-half", &cert, &key);
  ASSERT_NE(server, nullptr);
  auto next = other_ca_.Issue("server-half");
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_TRUE(ReplaceFileAtomically(next->key, key).ok());  // the certificate never follows
  // Past several refresh intervals, every connection still gets the old, whole pair.
  const absl::Time until = absl::Now() + absl::Seconds(3);
  int served = 0;
  while (absl::Now() < until) {
    ASSERT_TRUE(Get(server->Address(), ca_.ca_cert()).ok()) << "after " << served;
    ++served;
  }
  EXPECT_GT(served, 0);
}

}  // namespace
}  // namespace tandem
