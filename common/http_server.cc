#include "common/http_server.h"

#include <openssl/ssl.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <iterator>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/http_server_impl.h"
#include "common/http_session.h"
#include "common/http_session_base.h"
#include "common/tls_server_context.h"
#include "spdlog/spdlog.h"

namespace tandem {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;

namespace {

// Refusals (503) being written at once; a connection beyond them is closed unanswered.
constexpr int kMaxRefusing = 64;
// A refused connection is logged at most once per this.
constexpr absl::Duration kRefusedLogInterval = absl::Seconds(10);

}  // namespace

absl::string_view HttpRequest::Header(absl::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return v;
  }
  return {};
}

using http_internal::PlainStream;
using http_internal::Session;
using http_internal::SessionBase;
using http_internal::TlsStream;

void HttpServer::Impl::Accept(const std::shared_ptr<Impl>& self) {
  auto socket = std::make_shared<tcp::socket>(net::make_strand(ioc));
  acceptor.async_accept(*socket, [self, socket](beast::error_code ec) {
    if (ec == net::error::operation_aborted || !self->acceptor.is_open()) return;
    if (!ec) self->Opened(socket, self);
    self->Accept(self);
  });
}

bool HttpServer::Impl::EvictIdle() {
  // A few tries: the chosen one may wake (a request came) before it is claimed.
  for (int attempt = 0; attempt < 4; ++attempt) {
    std::shared_ptr<SessionBase> oldest;
    int64_t since = 0;
    {
      absl::MutexLock l(&sessions_mu);
      for (const auto& w : sessions) {
        std::shared_ptr<SessionBase> s = w.lock();
        if (s == nullptr) continue;
        const int64_t t = s->idle_since.load();
        if (t > 0 && (oldest == nullptr || t < since)) oldest = std::move(s), since = t;
      }
    }
    if (oldest == nullptr) return false;
    if (!oldest->idle_since.compare_exchange_strong(since, SessionBase::kClaimed)) continue;
    idle.fetch_sub(1, std::memory_order_relaxed);
    if (!oldest->slot_released.exchange(true)) connections.fetch_sub(1, std::memory_order_relaxed);
    net::post(oldest->executor(), [oldest] { oldest->Close(); });
    return true;
  }
  return false;
}

void HttpServer::Impl::ReportConnections() {
  absl::MutexLock l(&report_mu);
  if (on_connections_changed) on_connections_changed(connections.load(), idle.load());
}

void HttpServer::Impl::CountRefused() {
  const int64_t n = refused.fetch_add(1) + 1;
  if (options.on_connection_refused) options.on_connection_refused();
  const int64_t now = http_internal::SteadyNanos();
  int64_t last = refused_logged_at.load();
  if ((last == 0 || now - last >= absl::ToInt64Nanoseconds(kRefusedLogInterval)) &&
      refused_logged_at.compare_exchange_strong(last, now)) {
    spdlog::warn(
        "HTTP front: {} connections open, none idle: refusing new ones (503); {} refused since "
        "start (--http_max_connections)",
        options.max_connections, n);
  }
}

void HttpServer::Impl::Opened(const std::shared_ptr<tcp::socket>& socket,
                              const std::shared_ptr<Impl>& self) {
  bool refusal = false;
  if (connections.fetch_add(1, std::memory_order_relaxed) >= options.max_connections &&
      !EvictIdle()) {
    connections.fetch_sub(1, std::memory_order_relaxed);
    CountRefused();
    refusal = true;
    if (refusing.fetch_add(1, std::memory_order_relaxed) >= kMaxRefusing) {
      refusing.fetch_sub(1, std::memory_order_relaxed);
      beast::error_code ignored;
      socket->close(ignored);
      return;
    }
  }
  ReportConnections();
  beast::error_code ignored;
  socket->set_option(tcp::no_delay(true), ignored);
  std::shared_ptr<SessionBase> session;
  if (tls != nullptr) {
    std::shared_ptr<SSL_CTX> ctx = tls->Current();
    SSL_CTX_up_ref(ctx.get());  // net::ssl::context frees its own reference
    auto s = std::make_shared<Session<TlsStream>>(self, std::move(*socket), ctx.get(), refusal);
    session = s;
    net::post(s->executor(), [s] { s->Start(); });
  } else {
    auto s = std::make_shared<Session<PlainStream>>(self, std::move(*socket), nullptr, refusal);
    session = s;
    net::post(s->executor(), [s] { s->Start(); });
  }
  absl::MutexLock l(&sessions_mu);
  if (stopping) {
    net::post(session->executor(), [session] { session->Close(); });
    return;
  }
  // Forgets closed sessions as it goes, so the list stays as long as the open connections.
  for (auto it = sessions.begin(); it != sessions.end();) {
    it = it->expired() ? sessions.erase(it) : std::next(it);
  }
  sessions.push_back(session);
}

void HttpServer::Impl::Stop() {
  beast::error_code ignored;
  acceptor.close(ignored);
  absl::MutexLock l(&sessions_mu);
  stopping = true;
  for (auto& w : sessions) {
    if (auto s = w.lock()) net::post(s->executor(), [s] { s->Close(); });
  }
  sessions.clear();
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& address,
                                                              HttpServerOptions options,
                                                              Handler handler) {
  if (options.threads < 1 || options.max_connections < 1 || options.max_header_bytes < 1024 ||
      options.max_body_bytes < 1) {
    return absl::InvalidArgumentError(
        "HTTP server: threads, max_connections, max_header_bytes "
        "(>= 1024) and max_body_bytes must be positive");
  }
  if (options.read_timeout <= absl::ZeroDuration() ||
      options.idle_timeout <= absl::ZeroDuration() ||
      options.write_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("HTTP server: the timeouts must be positive");
  }
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("bad HOST:PORT '", address, "'"));
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  auto impl = std::make_shared<Impl>();
  impl->options = std::move(options);
  impl->handler = std::move(handler);
  {
    absl::MutexLock l(&impl->report_mu);
    impl->on_connections_changed = impl->options.on_connections_changed;
  }
  if (!impl->options.tls.cert.empty()) {
    auto tls = TlsServerContext::Create(impl->options.tls, "--tls_cert/--tls_key");
    if (!tls.ok()) return tls.status();
    impl->tls = std::move(*tls);
  }
  beast::error_code ec;
  const net::ip::address ip = net::ip::make_address(host.empty() ? "0.0.0.0" : host, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("bad host in '", address, "'"));
  const tcp::endpoint endpoint(ip, static_cast<uint16_t>(port));
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address, ": ", ec.message()));
  }
  const tcp::endpoint bound = impl->acceptor.local_endpoint();
  const std::string bound_host = bound.address().is_v6()
                                     ? absl::StrCat("[", bound.address().to_string(), "]")
                                     : bound.address().to_string();
  impl->Accept(impl);
  for (int i = 0; i < impl->options.threads; ++i) {
    impl->threads.emplace_back([io = &impl->ioc] { io->run(); });
  }
  return std::unique_ptr<HttpServer>(
      new HttpServer(std::move(impl), absl::StrCat(bound_host, ":", bound.port())));
}

HttpServer::HttpServer(std::shared_ptr<Impl> impl, std::string address)
    : impl_(std::move(impl)), address_(std::move(address)) {}

HttpServer::~HttpServer() {
  net::post(impl_->acceptor.get_executor(), [impl = impl_.get()] { impl->Stop(); });
  // run() returns once the closed connections' handlers have run and nothing is left to do.
  for (std::thread& t : impl_->threads) t.join();
  // A connection still referenced by an exchange closes later: its hook's owner may be gone.
  absl::MutexLock l(&impl_->report_mu);
  impl_->on_connections_changed = nullptr;
}

const char* HttpServer::Scheme() const { return impl_->tls != nullptr ? "https" : "http"; }

int HttpServer::IdleConnections() const {
  absl::MutexLock l(&impl_->sessions_mu);
  int idle = 0;
  for (const auto& w : impl_->sessions) {
    const std::shared_ptr<SessionBase> s = w.lock();
    if (s != nullptr && s->idle_since.load() > 0) ++idle;
  }
  return idle;
}

}  // namespace tandem
