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
#include <list>
#include <optional>
#include <system_error>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/process.h"
#include "common/tls_server_context.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"
#include "spdlog/spdlog.h"

namespace tandem {
namespace {

// A scrape request is a few hundred bytes; anything larger is not one.
constexpr size_t kMaxRequestBytes = 16 << 10;
// What a closing connection reads and drops after its answer (see kDrain).
constexpr size_t kMaxDrainBytes = 64 << 10;
constexpr int kMaxConnections = 10000;
constexpr absl::Duration kMaxRequestTimeout = absl::Hours(1);
constexpr absl::Duration kMaxIdleTimeout = absl::Hours(24);
// Connections accepted per turn of the loop, so a burst of them cannot starve the open ones.
constexpr int kAcceptsPerTurn = 16;

// Where the request's header ends (after its blank line), or npos. A bare LF ends lines too
// (RFC 9112 section 2.2 lets a server accept it).
size_t HeaderEnd(const std::string& request) {
  const size_t crlf = request.find("\r\n\r\n");
  const size_t lf = request.find("\n\n");
  if (crlf == std::string::npos && lf == std::string::npos) return std::string::npos;
  return crlf < lf ? crlf + 4 : lf + 2;
}

// `head`: the answer to HEAD, which says the body's length but does not send it.
std::string Response(const char* status, const char* type, const std::string& body, bool keep_alive,
                     bool head = false) {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", type,
                      "\r\nContent-Length: ", body.size(),
                      keep_alive ? "\r\nConnection: keep-alive" : "\r\nConnection: close",
                      "\r\n\r\n", head ? "" : body);
}

// Whether the connection is kept after the answer: HTTP/1.1 keeps it unless the client says
// "close", HTTP/1.0 only if it says "keep-alive". Never after a request with a body (a GET may
// carry one): the body is not read as such, so the connection closes and drains it instead of
// taking it for the next request.
bool WantsKeepAlive(const std::string& request, const std::string& version) {
  bool keep = version == "HTTP/1.1";
  for (absl::string_view line : absl::StrSplit(request, '\n')) {
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    const absl::string_view name = absl::StripAsciiWhitespace(line.substr(0, colon));
    if (absl::EqualsIgnoreCase(name, "transfer-encoding")) return false;
    if (absl::EqualsIgnoreCase(name, "content-length") &&
        absl::StripAsciiWhitespace(line.substr(colon + 1)) != "0") {
      return false;
    }
    if (!absl::EqualsIgnoreCase(name, "connection")) continue;
    for (absl::string_view token : absl::StrSplit(line.substr(colon + 1), ',')) {
      token = absl::StripAsciiWhitespace(token);
      if (absl::EqualsIgnoreCase(token, "close")) return false;
      if (absl::EqualsIgnoreCase(token, "keep-alive")) keep = true;
    }
  }
  return keep;
}

int MillisecondsUntil(std::chrono::steady_clock::time_point deadline,
                      std::chrono::steady_clock::time_point now) {
  if (deadline <= now) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
  return static_cast<int>(std::min<int64_t>(ms, 1 << 30));
}

// The steady clock's time `d` from now.
auto DeadlineIn(absl::Duration d) {
  return std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(d);
}

}  // namespace

// One client connection, non-blocking, plain or TLS.
struct MetricsServer::Connection {
  enum class State {
    kHandshake,  // TLS handshake under way
    kRead,       // reading a request header
    kWrite,      // writing an answer
    // After a closing answer: our side is shut (FIN sent), and what the client still sends is
    // read and dropped until it closes. Closing with unread input would make the kernel reset
    // the connection, which can destroy the answer before the client reads it.
    kDrain,
  };
  // How a non-blocking read or write went.
  enum class Io { kProgress, kBlocked, kEnd };

  Connection(int fd, SSL* ssl, TimePoint deadline)
      : fd(fd),
        ssl(ssl),
        state(ssl != nullptr ? State::kHandshake : State::kRead),
        deadline(deadline) {}
  ~Connection() {
    if (ssl != nullptr) SSL_free(ssl);
    ::close(fd);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Appends at most `max` received bytes to `in`.
  Io Read(size_t max) {
    char buf[4096];
    const size_t want = std::min(sizeof(buf), max);
    if (ssl != nullptr) {
      const int n = SSL_read(ssl, buf, static_cast<int>(want));
      if (n <= 0) return SslIo(n, "read");
      in.append(buf, static_cast<size_t>(n));
      return Io::kProgress;
    }
    const ssize_t n = ::recv(fd, buf, want, 0);
    if (n > 0) {
      in.append(buf, static_cast<size_t>(n));
      return Io::kProgress;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      events = POLLIN;
      return Io::kBlocked;
    }
    return Io::kEnd;
  }

  // Writes more of `out` from `written`.
  Io Write() {
    const size_t left = out.size() - written;
    if (ssl != nullptr) {
      // A retry after WANT_WRITE passes the same bytes again, as OpenSSL requires.
      const int n =
          SSL_write(ssl, out.data() + written, static_cast<int>(std::min<size_t>(left, 1 << 30)));
      if (n <= 0) return SslIo(n, "write");
      written += static_cast<size_t>(n);
      return Io::kProgress;
    }
    const ssize_t n = ::send(fd, out.data() + written, left, MSG_NOSIGNAL);
    if (n >= 0) {
      written += static_cast<size_t>(n);
      return Io::kProgress;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      events = POLLOUT;
      return Io::kBlocked;
    }
    return Io::kEnd;
  }

  // After an SSL_* call returned `rc` <= 0: blocked on the socket (events says which way), or
  // finished (a failure is logged at debug: a misconfigured scraper shows there).
  Io SslIo(int rc, const char* what) {
    const int error = SSL_get_error(ssl, rc);
    if (error == SSL_ERROR_WANT_READ) {
      events = POLLIN;
      return Io::kBlocked;
    }
    if (error == SSL_ERROR_WANT_WRITE) {
      events = POLLOUT;
      return Io::kBlocked;
    }
    if (error != SSL_ERROR_ZERO_RETURN && spdlog::should_log(spdlog::level::debug)) {
      const unsigned long e = ERR_peek_error();
      char buf[256] = "connection closed";
      if (e != 0) ERR_error_string_n(e, buf, sizeof(buf));
      spdlog::debug("metrics TLS {} failed: {}", what, buf);
    }
    ERR_clear_error();
    return Io::kEnd;
  }

  // The steps of MetricsServer::Advance, one per state. Each returns nullopt when the connection
  // moved on (the next step follows at once), else Advance's answer: true while it waits for its
  // socket (or its next turn), false once it is finished.
  std::optional<bool> Handshake() {
    const int rc = SSL_do_handshake(ssl);
    if (rc == 1) {
      state = State::kRead;
      return std::nullopt;
    }
    return SslIo(rc, "handshake") == Io::kBlocked;
  }

  std::optional<bool> ReadRequest(const MetricsServer& server) {
    if (const size_t end = HeaderEnd(in); end != std::string::npos) {
      out = server.Answer(in.substr(0, end), &keep_alive);
      in.erase(0, end);
      written = 0;
      state = State::kWrite;
      return std::nullopt;
    }
    if (in.size() >= kMaxRequestBytes) {
      out = Response("431 Request Header Fields Too Large", "text/plain", "request too large\n",
                     false);
      keep_alive = false;
      written = 0;
      state = State::kWrite;
      return std::nullopt;
    }
    const Io io = Read(kMaxRequestBytes - in.size());
    if (io != Io::kProgress) return io == Io::kBlocked;
    return std::nullopt;
  }

  std::optional<bool> WriteAnswer(const MetricsServer& server) {
    if (written < out.size()) {
      const Io io = Write();
      if (io != Io::kProgress) return io == Io::kBlocked;
      return std::nullopt;
    }
    out.clear();
    events = POLLIN;
    if (keep_alive) {
      state = State::kRead;
      if (HeaderEnd(in) != std::string::npos || (ssl != nullptr && SSL_has_pending(ssl) == 1)) {
        // Pipelined: answered next turn, under a fresh budget, so that one client sending
        // requests back to back takes turns with the others instead of holding the thread.
        ready = true;
        deadline = DeadlineIn(server.options_.request_timeout);
        return true;
      }
      if (!in.empty()) {  // part of the next request: read on, under its own budget
        deadline = DeadlineIn(server.options_.request_timeout);
        return std::nullopt;
      }
      idle = true;
      deadline = DeadlineIn(server.options_.idle_timeout);
      return true;
    }
    if (ssl != nullptr) {
      // close_notify, best effort: a full socket buffer (WANT_WRITE) drops it, and the
      // client's is not awaited. The answer's Content-Length already delimits it.
      SSL_shutdown(ssl);
      ERR_clear_error();
    }
    ::shutdown(fd, SHUT_WR);
    in.clear();
    state = State::kDrain;
    return std::nullopt;
  }

  std::optional<bool> Drain() {
    if (drained >= kMaxDrainBytes) return false;
    const size_t before = in.size();
    const Io io = Read(kMaxDrainBytes - drained);
    drained += in.size() - before;
    in.clear();
    if (io != Io::kProgress) return io == Io::kBlocked;
    return std::nullopt;
  }

  const int fd;
  SSL* const ssl;  // null: plain HTTP
  State state;
  TimePoint deadline;     // the connection is closed when it passes
  short events = POLLIN;  // what the socket must become ready for before the next step
  bool idle = false;      // kept alive, between requests: may give its place to a new connection
  bool ready = false;     // a request is buffered (not visible to poll): advance without waiting
  bool keep_alive = false;
  std::string in;  // received, not yet answered
  std::string out;
  size_t written = 0;
  size_t drained = 0;
};

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& address, std::shared_ptr<prometheus::Collectable> source,
    MetricsServerOptions options) {
  if (options.max_connections < 1 || options.max_connections > kMaxConnections) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics server max connections must be in [1, ", kMaxConnections, "]"));
  }
  if (options.request_timeout <= absl::ZeroDuration() ||
      options.request_timeout > kMaxRequestTimeout) {
    return absl::InvalidArgumentError(absl::StrCat("metrics server request timeout must be in (0, ",
                                                   absl::FormatDuration(kMaxRequestTimeout), "]"));
  }
  if (options.idle_timeout <= absl::ZeroDuration() || options.idle_timeout > kMaxIdleTimeout) {
    return absl::InvalidArgumentError(absl::StrCat("metrics server idle timeout must be in (0, ",
                                                   absl::FormatDuration(kMaxIdleTimeout), "]"));
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
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
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
      new MetricsServer(fd, wake, absl::StrCat(host, ":", bound_port), std::move(source),
                        std::move(options), std::move(tls)));
  // std::thread reports a failed start only by throwing.
  try {
    server->thread_ = std::thread([s = server.get()] { s->Loop(); });
  } catch (const std::system_error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot start the metrics thread: ", e.what()));
  }
  return server;
}

MetricsServer::MetricsServer(int listen_fd, int wake_fd, std::string address,
                             std::shared_ptr<prometheus::Collectable> source,
                             MetricsServerOptions options, std::unique_ptr<TlsServerContext> tls)
    : listen_fd_(listen_fd),
      wake_fd_(wake_fd),
      address_(std::move(address)),
      source_(std::move(source)),
      options_(std::move(options)),
      tls_(std::move(tls)) {}

MetricsServer::~MetricsServer() {
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
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
  const auto request_timeout = absl::ToChronoNanoseconds(options_.request_timeout);
  const size_t max_connections = static_cast<size_t>(options_.max_connections);
  std::list<std::unique_ptr<Connection>> connections;
  std::vector<pollfd> fds;
  bool backoff = false;  // out of descriptors: stop accepting for a moment
  const auto room = [&] {
    return connections.size() < max_connections ||
           std::any_of(connections.begin(), connections.end(),
                       [](const auto& c) { return c->idle; });
  };
  while (true) {
    auto now = std::chrono::steady_clock::now();
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, static_cast<short>(room() && !backoff ? POLLIN : 0), 0});
    int timeout = backoff ? 100 : -1;
    for (const auto& c : connections) {
      fds.push_back({c->fd, c->events, 0});
      // A connection with a request already buffered is advanced next turn without waiting.
      const int ms = c->ready ? 0 : MillisecondsUntil(c->deadline, now);
      timeout = timeout < 0 ? ms : std::min(timeout, ms);
    }
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) {
      spdlog::error("metrics server: poll failed: {}", strerror(errno));
      return;
    }
    if (fds[0].revents != 0) return;
    backoff = false;
    now = std::chrono::steady_clock::now();
    size_t i = 2;  // the pollfds of the connections follow the list's order
    for (auto it = connections.begin(); it != connections.end(); ++i) {
      Connection& c = **it;
      bool open = (fds[i].revents == 0 && !c.ready) || Advance(c);
      if (open && std::chrono::steady_clock::now() >= c.deadline) open = false;
      it = open ? std::next(it) : connections.erase(it);
    }
    // Idle connections polled as room may have woken with a request: then new ones wait.
    if ((fds[1].revents & POLLIN) == 0 || !room()) continue;
    for (int n = 0; n < kAcceptsPerTurn; ++n) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        backoff = errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM;
        break;
      }
      if (connections.size() >= max_connections) {
        // room() held: one is idle.
        connections.erase(std::find_if(connections.begin(), connections.end(),
                                       [](const auto& c) { return c->idle; }));
      }
      std::unique_ptr<Connection> c = Accept(fd, now + request_timeout);
      // The client may have sent its request with the handshake already.
      if (c != nullptr && Advance(*c)) connections.push_back(std::move(c));
      if (!room()) break;
    }
  }
}

std::unique_ptr<MetricsServer::Connection> MetricsServer::Accept(int fd, TimePoint deadline) {
  SSL* ssl = nullptr;
  if (tls_ != nullptr) {
    ERR_clear_error();  // SSL_get_error reads this thread's queue: nothing stale in it
    ssl = SSL_new(tls_->Current().get());
    if (ssl == nullptr || SSL_set_fd(ssl, fd) != 1) {
      if (ssl != nullptr) SSL_free(ssl);
      ERR_clear_error();
      ::close(fd);
      return nullptr;
    }
    SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE);
    SSL_set_accept_state(ssl);
  }
  return std::make_unique<Connection>(fd, ssl, deadline);
}

bool MetricsServer::Advance(Connection& c) {
  c.ready = false;
  if (c.idle) {
    // Woken between requests: something arrived (bytes of a request, perhaps only part of a TLS
    // record, or the end of the stream), so the next request's own time starts now.
    c.idle = false;
    c.deadline = DeadlineIn(options_.request_timeout);
  }
  while (true) {
    std::optional<bool> open;
    switch (c.state) {
      case Connection::State::kHandshake:
        open = c.Handshake();
        break;
      case Connection::State::kRead:
        open = c.ReadRequest(*this);
        break;
      case Connection::State::kWrite:
        open = c.WriteAnswer(*this);
        break;
      case Connection::State::kDrain:
        open = c.Drain();
        break;
    }
    if (open.has_value()) return *open;
  }
}

std::string MetricsServer::Answer(const std::string& request, bool* keep_alive) const {
  *keep_alive = false;
  const std::string line = request.substr(0, request.find_first_of("\r\n"));
  const std::vector<std::string> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.")) {
    return Response("400 Bad Request", "text/plain", "bad request\n", false);
  }
  const std::string& method = parts[0];
  const std::string path = parts[1].substr(0, parts[1].find('?'));
  if (method != "GET" && method != "HEAD") {
    // A body may follow; the connection is not kept, so it is never taken for a request.
    return Response("405 Method Not Allowed", "text/plain", "GET only\n", false);
  }
  const bool head = method == "HEAD";
  *keep_alive = WantsKeepAlive(request, parts[2]);
  if (path != "/metrics") {
    return Response("404 Not Found", "text/plain", "metrics are at /metrics\n", *keep_alive, head);
  }
  return Response("200 OK", "text/plain; version=0.0.4; charset=utf-8",
                  prometheus::TextSerializer().Serialize(source_->Collect()), *keep_alive, head);
}

}  // namespace tandem
