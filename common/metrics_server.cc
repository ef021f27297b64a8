#include "common/metrics_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string_view>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/process.h"
#include "common/tls_server_context.h"
#include "prometheus/text_serializer.h"
#include "spdlog/spdlog.h"

namespace tandem {
namespace {

// A scrape request is a few hundred bytes; anything larger is not one.
constexpr size_t kMaxRequestBytes = 16 << 10;
constexpr int kMaxThreads = 1024;
constexpr absl::Duration kMaxConnectionTimeout = absl::Hours(1);

// Where the request's header ends (after its blank line), or npos. A bare LF ends lines too
// (RFC 9112 section 2.2 lets a server accept it).
size_t HeaderEnd(const std::string& request) {
  const size_t crlf = request.find("\r\n\r\n");
  const size_t lf = request.find("\n\n");
  if (crlf == std::string::npos && lf == std::string::npos) return std::string::npos;
  return crlf < lf ? crlf + 4 : lf + 2;
}

std::string Response(const char* status, const char* type, const std::string& body) {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
}

// One accepted, non-blocking connection, plain or TLS. Every wait ends at the connection's
// deadline or when the server stops, so a client that stalls cannot hold a thread for longer.
class Connection {
 public:
  Connection(int fd, int wake_fd, std::chrono::steady_clock::time_point deadline)
      : fd_(fd), wake_fd_(wake_fd), deadline_(deadline) {}
  ~Connection() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    ERR_clear_error();
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // The TLS handshake; false when it fails (a plaintext client, no or a wrong client
  // certificate) or runs out of time.
  bool Handshake(SSL_CTX* ctx) {
    ERR_clear_error();  // SSL_get_error reads this thread's queue: nothing stale in it
    ssl_ = SSL_new(ctx);
    if (ssl_ == nullptr || SSL_set_fd(ssl_, fd_) != 1) return false;
    SSL_set_mode(ssl_, SSL_MODE_ENABLE_PARTIAL_WRITE);
    while (true) {
      const int rc = SSL_accept(ssl_);
      if (rc == 1) return true;
      if (!RetrySsl(rc, "handshake")) return false;
    }
  }

  // Appends at least one and at most `max` bytes that arrived; false at the end of the stream,
  // an error or the deadline.
  bool Read(std::string* out, size_t max) {
    char buf[4096];
    const size_t want = std::min(sizeof(buf), max);
    while (true) {
      if (ssl_ != nullptr) {
        const int n = SSL_read(ssl_, buf, static_cast<int>(want));
        if (n > 0) return out->append(buf, static_cast<size_t>(n)), true;
        if (!RetrySsl(n, "read")) return false;
        continue;
      }
      const ssize_t n = ::recv(fd_, buf, want, 0);
      if (n > 0) return out->append(buf, static_cast<size_t>(n)), true;
      if (n == 0) return false;
      if (errno == EINTR) continue;
      if ((errno != EAGAIN && errno != EWOULDBLOCK) || !Wait(POLLIN)) return false;
    }
  }

  bool Write(std::string_view data) {
    while (!data.empty()) {
      ssize_t n;
      if (ssl_ != nullptr) {
        n = SSL_write(ssl_, data.data(), static_cast<int>(std::min<size_t>(data.size(), 1 << 30)));
        if (n <= 0) {
          if (!RetrySsl(static_cast<int>(n), "write")) return false;
          continue;
        }
      } else {
        n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
        if (n < 0) {
          if (errno == EINTR) continue;
          if ((errno != EAGAIN && errno != EWOULDBLOCK) || !Wait(POLLOUT)) return false;
          continue;
        }
      }
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Says the response is complete (TLS close_notify); does not wait for the peer's.
  void Close() {
    if (ssl_ != nullptr) SSL_shutdown(ssl_);
  }

  // For an answer sent before the whole request was read: closing with unread input makes the
  // kernel reset the connection, which can destroy the answer before the client reads it. So
  // the write side is closed first and what the client still sends is read and dropped, until
  // it closes too, `max` bytes, or the deadline.
  void CloseAfterEarlyAnswer(size_t max) {
    Close();
    ::shutdown(fd_, SHUT_WR);
    std::string discard;
    while (discard.size() < max && Read(&discard, max - discard.size())) discard.clear();
  }

 private:
  // Waits for `events` on the socket; false at the deadline or when the server stops.
  bool Wait(short events) {
    while (true) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(
          deadline_ - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd fds[2] = {{fd_, events, 0}, {wake_fd_, POLLIN, 0}};
      const int n = ::poll(fds, 2, static_cast<int>(std::min<int64_t>(left.count(), 1 << 30)));
      if (n < 0 && errno == EINTR) continue;
      // POLLERR and POLLHUP count as ready: the next read or write reports them.
      return n > 0 && fds[1].revents == 0;
    }
  }

  // After an SSL_* call returned `rc` <= 0: waits for what OpenSSL needs and returns true to
  // retry, or false for a failure (logged at debug: a misconfigured scraper shows here).
  bool RetrySsl(int rc, const char* what) {
    const int error = SSL_get_error(ssl_, rc);
    if (error == SSL_ERROR_WANT_READ) return Wait(POLLIN);
    if (error == SSL_ERROR_WANT_WRITE) return Wait(POLLOUT);
    if (error != SSL_ERROR_ZERO_RETURN && spdlog::should_log(spdlog::level::debug)) {
      const unsigned long e = ERR_peek_error();
      char buf[256] = "connection closed";
      if (e != 0) ERR_error_string_n(e, buf, sizeof(buf));
      spdlog::debug("metrics TLS {} failed: {}", what, buf);
    }
    return false;
  }

  const int fd_;
  const int wake_fd_;
  const std::chrono::steady_clock::time_point deadline_;
  SSL* ssl_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& address, std::shared_ptr<prometheus::Registry> registry,
    MetricsServerOptions options) {
  if (options.threads < 1 || options.threads > kMaxThreads) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics server threads must be in [1, ", kMaxThreads, "]"));
  }
  if (options.connection_timeout <= absl::ZeroDuration() ||
      options.connection_timeout > kMaxConnectionTimeout) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics server connection timeout must be in (0, ",
                     absl::FormatDuration(kMaxConnectionTimeout), "]"));
  }
  std::unique_ptr<TlsServerContext> tls;
  if (!options.tls.cert.empty() || !options.tls.key.empty()) {
    auto ctx = TlsServerContext::Create(options.tls, "metrics TLS");
    if (!ctx.ok()) return ctx.status();
    tls = std::move(*ctx);
  }
  auto host_port = ParseHostPort("metrics-address", address);
  if (!host_port.ok()) return host_port.status();
  const std::string host = host_port->first.empty() ? "0.0.0.0" : host_port->first;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(host_port->second);
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot serve metrics on ", address, ": ", gai_strerror(rc)));
  }
  int fd = -1;
  std::string error = "no address";
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
      error = strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address, ": ", error));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const int bound_port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  const int wake = eventfd(0, EFD_CLOEXEC);
  if (wake < 0) {
    ::close(fd);
    return absl::InternalError("eventfd failed");
  }
  std::unique_ptr<MetricsServer> server(
      new MetricsServer(fd, wake, absl::StrCat(host, ":", bound_port), std::move(registry),
                        std::move(options), std::move(tls)));
  // std::thread reports a failed start only by throwing; the destructor then stops and joins
  // the threads already running.
  try {
    for (int i = 0; i < server->options_.threads; ++i) {
      server->threads_.emplace_back([s = server.get()] { s->Loop(); });
    }
  } catch (const std::system_error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot start ", server->options_.threads, " metrics threads: ", e.what()));
  }
  return server;
}

MetricsServer::MetricsServer(int listen_fd, int wake_fd, std::string address,
                             std::shared_ptr<prometheus::Registry> registry,
                             MetricsServerOptions options, std::unique_ptr<TlsServerContext> tls)
    : listen_fd_(listen_fd),
      wake_fd_(wake_fd),
      address_(std::move(address)),
      registry_(std::move(registry)),
      options_(std::move(options)),
      tls_(std::move(tls)) {}

MetricsServer::~MetricsServer() {
  // The eventfd stays readable (nobody reads it), so it wakes every thread, idle or serving.
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
  for (std::thread& t : threads_) t.join();
  ::close(listen_fd_);
  ::close(wake_fd_);
}

void MetricsServer::KeepUntilExit(std::unique_ptr<MetricsServer> server) { server.reset(); }

void MetricsServer::Loop() {
  // OpenSSL writes to the socket with write(2): a client that went away must give EPIPE here, not
  // a SIGPIPE that kills the process. Blocked in this thread only; a pending one stays harmless.
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // EAGAIN: another thread took it. Out of descriptors: back off instead of spinning.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        pollfd wake{wake_fd_, POLLIN, 0};
        ::poll(&wake, 1, 100);
      }
      continue;
    }
    Serve(fd);
    ::close(fd);
  }
}

void MetricsServer::Serve(int fd) {
  Connection c(
      fd, wake_fd_,
      std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(options_.connection_timeout));
  if (tls_ != nullptr && !c.Handshake(tls_->Current().get())) return;
  std::string request;
  while (HeaderEnd(request) == std::string::npos) {
    if (request.size() >= kMaxRequestBytes) {
      if (c.Write(Response("431 Request Header Fields Too Large", "text/plain",
                           "request too large\n"))) {
        c.CloseAfterEarlyAnswer(kMaxRequestBytes);
      }
      return;
    }
    if (!c.Read(&request, kMaxRequestBytes - request.size())) return;
  }
  const std::string line = request.substr(0, request.find_first_of("\r\n"));
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
  std::string response;
  if (sp1 == std::string::npos || sp2 == std::string::npos) {
    response = Response("400 Bad Request", "text/plain", "bad request\n");
  } else {
    const std::string method = line.substr(0, sp1);
    std::string path = line.substr(sp1 + 1, sp2 - sp1 - 1);
    path = path.substr(0, path.find('?'));
    if (method != "GET" && method != "HEAD") {
      response = Response("405 Method Not Allowed", "text/plain", "GET only\n");
    } else if (path != "/metrics") {
      response = Response("404 Not Found", "text/plain", "metrics are at /metrics\n");
    } else {
      const std::string body = prometheus::TextSerializer().Serialize(registry_->Collect());
      response = Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", body);
      if (method == "HEAD") response.resize(response.find("\r\n\r\n") + 4);
    }
  }
  if (c.Write(response)) c.Close();
}

}  // namespace tandem
