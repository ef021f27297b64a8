#include "common/http_server.h"

#include <openssl/ssl.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <deque>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/tls_server_context.h"
#include "spdlog/spdlog.h"

namespace tandem {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

absl::string_view HttpRequest::Header(absl::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return v;
  }
  return {};
}

// Not anonymous: HttpServer::Impl (declared in the header) holds these types.
namespace http_internal {

class SessionBase;

// What a session must do on its strand; the exchange posts these.
struct Pending {
  enum Kind { kWhole, kHead, kData, kEnd } kind;
  HttpResponse head;  // kWhole, kHead
  std::string bytes;  // kData, kEnd
  std::function<void(bool)> done;
};

}  // namespace http_internal

using http_internal::Pending;
using http_internal::SessionBase;

struct HttpServer::Impl {
  HttpServerOptions options;
  Handler handler;
  std::unique_ptr<TlsServerContext> tls;
  net::io_context ioc;
  // On a strand of its own: Accept's chain and Stop never run at once.
  tcp::acceptor acceptor{net::make_strand(ioc)};
  std::vector<std::thread> threads;
  std::atomic<int> connections{0};
  std::mutex sessions_mu;
  std::list<std::weak_ptr<SessionBase>> sessions;  // guarded by sessions_mu
  bool stopping = false;                           // guarded by sessions_mu

  void Accept(const std::shared_ptr<Impl>& self);
  void Opened(const std::shared_ptr<tcp::socket>& socket, const std::shared_ptr<Impl>& self);
  // On the io_context: closes the acceptor and every connection.
  void Stop();
};

namespace http_internal {

// The connection's side that the exchange drives; every method runs on the session's strand.
class SessionBase : public std::enable_shared_from_this<SessionBase> {
 public:
  virtual ~SessionBase() = default;
  virtual net::any_io_executor executor() = 0;
  virtual void Submit(Pending p) = 0;
  virtual void Close() = 0;
};

class Exchange final : public HttpExchange {
 public:
  Exchange(std::shared_ptr<SessionBase> session, HttpRequest request)
      : session_(std::move(session)), request_(std::move(request)) {}

  const HttpRequest& request() const override { return request_; }
  void Respond(HttpResponse response) override {
    Post(Pending{Pending::kWhole, std::move(response), {}, {}});
  }
  void StartStream(HttpResponse head) override {
    Post(Pending{Pending::kHead, std::move(head), {}, {}});
  }
  void Write(std::string bytes, std::function<void(bool ok)> done) override {
    Post(Pending{Pending::kData, {}, std::move(bytes), std::move(done)});
  }
  void EndStream(std::string bytes) override {
    Post(Pending{Pending::kEnd, {}, std::move(bytes), {}});
  }
  void OnClientGone(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!gone_) {
        on_gone_ = std::move(fn);
        return;
      }
    }
    fn();
  }
  // The session lost the connection before the exchange ended.
  void Gone() {
    std::function<void()> fn;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (gone_) return;
      gone_ = true;
      fn = std::move(on_gone_);
    }
    if (fn) fn();
  }

 private:
  void Post(Pending p) {
    net::post(session_->executor(),
              [s = session_, p = std::move(p)]() mutable { s->Submit(std::move(p)); });
  }

  const std::shared_ptr<SessionBase> session_;
  const HttpRequest request_;
  std::mutex mu_;
  bool gone_ = false;
  std::function<void()> on_gone_;
};

HttpRequest ToRequest(http::request<http::string_body>&& r) {
  HttpRequest out;
  out.method = std::string(r.method_string());
  out.target = std::string(r.target());
  for (const auto& f : r) {
    out.headers.emplace_back(
        absl::AsciiStrToLower(absl::string_view(f.name_string().data(), f.name_string().size())),
        std::string(f.value()));
  }
  out.body = std::move(r.body());
  return out;
}

struct PlainStream {
  PlainStream(tcp::socket&& socket, SSL_CTX*) : s(std::move(socket)) {}
  static constexpr bool kTls = false;
  beast::tcp_stream s;
};

struct TlsStream {
  TlsStream(tcp::socket&& socket, SSL_CTX* native) : ctx(native), s(std::move(socket), ctx) {}
  static constexpr bool kTls = true;
  net::ssl::context ctx;  // owns a reference to the server's context of the moment
  beast::ssl_stream<beast::tcp_stream> s;
};

template <class Holder>
class Session final : public SessionBase {
 public:
  Session(std::shared_ptr<HttpServer::Impl> server, tcp::socket&& socket, SSL_CTX* ctx)
      : server_(std::move(server)), holder_(std::move(socket), ctx) {}
  ~Session() override { server_->connections.fetch_sub(1, std::memory_order_relaxed); }

  net::any_io_executor executor() override { return holder_.s.get_executor(); }

  void Start() {
    Lowest().expires_after(ToChrono(server_->options.read_timeout));
    if constexpr (Holder::kTls) {
      holder_.s.async_handshake(net::ssl::stream_base::server,
                                [self = Self()](beast::error_code ec) {
                                  if (ec) return self->Close();
                                  self->ReadRequest();
                                });
    } else {
      ReadRequest();
    }
  }

  void Close() override {
    if (closed_) return;
    closed_ = true;
    if (current_ != nullptr) std::exchange(current_, nullptr)->Gone();
    // The write in flight keeps its entry (its bytes) until it completes (OnWritten).
    const size_t keep = writing_ ? 1 : 0;
    while (queue_.size() > keep) {
      Pending p = std::move(queue_.back());
      queue_.pop_back();
      if (p.done) p.done(false);
    }
    beast::error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
    Lowest().close();
  }

  void Submit(Pending p) override {
    if (closed_) {
      if (p.done) p.done(false);
      return;
    }
    queue_.push_back(std::move(p));
    if (!writing_) WriteNext();
  }

 private:
  std::shared_ptr<Session> Self() { return std::static_pointer_cast<Session>(shared_from_this()); }
  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(holder_.s); }
  static std::chrono::steady_clock::duration ToChrono(absl::Duration d) {
    return absl::ToChronoNanoseconds(d);
  }

  void ReadRequest() {
    if (closed_) return;
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(server_->options.max_header_bytes));
    parser_->body_limit(static_cast<uint64_t>(server_->options.max_body_bytes));
    StartRead();
  }
  void StartRead() {
    reading_ = true;
    http::async_read(holder_.s, buffer_, *parser_,
                     [self = Self()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

  void OnRead(beast::error_code ec) {
    reading_ = false;
    if (closed_) return;
    if (ec == net::error::operation_aborted && restart_read_) {
      // Cancelled by EndExchange to put the idle timeout on the wait; the parser keeps its state.
      restart_read_ = false;
      Lowest().expires_after(ToChrono(server_->options.read_timeout));
      return StartRead();
    }
    if (ec) {
      if (current_ != nullptr) return Close();  // the client went away mid-answer
      return Refuse(ec);
    }
    if (current_ != nullptr) {
      pipelined_ = parser_->release();
      return;
    }
    Dispatch(parser_->release());
  }

  // A request that could not be read: answered when HTTP has a status for it, then closed.
  void Refuse(beast::error_code ec) {
    int status = 0;
    std::string message;
    if (ec == http::error::body_limit) {
      status = 413;
      message = absl::StrCat("the request body exceeds ", server_->options.max_body_bytes,
                             " bytes (--max_request_bytes)");
    } else if (ec == http::error::header_limit) {
      status = 431;
      message = absl::StrCat("the request headers exceed ", server_->options.max_header_bytes,
                             " bytes (--http_max_header_bytes)");
    } else if (ec.category() == beast::error_code(http::error::end_of_stream).category() &&
               ec != http::error::end_of_stream && ec != http::error::partial_message) {
      status = 400;
      message = absl::StrCat("malformed HTTP request: ", ec.message());
    }
    if (status == 0) return Close();  // closed, reset or timed out: nobody to answer
    keep_alive_ = false;
    current_ = std::make_shared<Exchange>(shared_from_this(), HttpRequest{});
    HttpResponse r{status, {{"content-type", "application/json"}}, ""};
    r.body = absl::StrCat(R"({"error":{"message":")", message,
                          R"(","type":"invalid_request_error","param":null,"code":null}})");
    queue_.push_back(Pending{Pending::kWhole, std::move(r), {}, {}});
    WriteNext();
  }

  void Dispatch(http::request<http::string_body>&& r) {
    keep_alive_ = r.keep_alive();
    auto exchange = std::make_shared<Exchange>(shared_from_this(), ToRequest(std::move(r)));
    current_ = exchange;
    // While the answer is pending the connection is read on, without a timeout: its end is the
    // client going away (a pipelined request waits in pipelined_).
    Lowest().expires_never();
    ReadRequest();
    server_->handler(std::move(exchange));
  }

  void WriteNext() {
    if (closed_ || queue_.empty()) {
      writing_ = false;
      return;
    }
    writing_ = true;
    Pending& p = queue_.front();
    Lowest().expires_after(ToChrono(server_->options.write_timeout));
    auto written = [self = Self()](beast::error_code ec, size_t) { self->OnWritten(ec); };
    switch (p.kind) {
      case Pending::kWhole:
        whole_.emplace(static_cast<http::status>(p.head.status), 11);
        for (auto& [k, v] : p.head.headers) whole_->set(k, v);
        whole_->body() = std::move(p.head.body);
        whole_->keep_alive(keep_alive_);
        whole_->prepare_payload();
        return http::async_write(holder_.s, *whole_, std::move(written));
      case Pending::kHead:
        head_.emplace(static_cast<http::status>(p.head.status), 11);
        for (auto& [k, v] : p.head.headers) head_->set(k, v);
        head_->keep_alive(keep_alive_);
        head_->chunked(true);
        head_serializer_.emplace(*head_);
        return http::async_write_header(holder_.s, *head_serializer_, std::move(written));
      case Pending::kData:
        if (p.bytes.empty()) return OnWritten({});
        return net::async_write(holder_.s, http::make_chunk(net::buffer(p.bytes)),
                                std::move(written));
      case Pending::kEnd:
        if (!p.bytes.empty()) {
          // The last data first; this entry then comes round again with no bytes.
          p.kind = Pending::kData;
          queue_.insert(queue_.begin() + 1, Pending{Pending::kEnd, {}, {}, {}});
          return net::async_write(holder_.s, http::make_chunk(net::buffer(p.bytes)),
                                  std::move(written));
        }
        return net::async_write(holder_.s, http::make_chunk_last(), std::move(written));
    }
  }

  void OnWritten(beast::error_code ec) {
    Pending p = std::move(queue_.front());
    queue_.pop_front();
    writing_ = false;
    if (ec || closed_) {
      Close();
      if (p.done) p.done(false);
      return;
    }
    Lowest().expires_never();
    if (p.done) p.done(true);
    if (p.kind == Pending::kEnd || p.kind == Pending::kWhole) EndExchange();
    WriteNext();
  }

  void EndExchange() {
    current_.reset();
    whole_.reset();
    head_serializer_.reset();
    head_.reset();
    if (!keep_alive_) return Close();
    if (pipelined_.has_value()) {
      auto r = std::move(*pipelined_);
      pipelined_.reset();
      return Dispatch(std::move(r));
    }
    // The read of the next request has waited without a timeout; restart it with one.
    if (reading_) {
      restart_read_ = true;
      beast::error_code ignored;
      Lowest().socket().cancel(ignored);
    }
  }

  const std::shared_ptr<HttpServer::Impl> server_;
  Holder holder_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::request<http::string_body>> pipelined_;
  std::shared_ptr<Exchange> current_;
  bool keep_alive_ = true;
  bool reading_ = false;
  bool restart_read_ = false;
  bool writing_ = false;
  bool closed_ = false;
  std::deque<Pending> queue_;
  std::optional<http::response<http::string_body>> whole_;
  std::optional<http::response<http::empty_body>> head_;
  std::optional<http::response_serializer<http::empty_body>> head_serializer_;
};

}  // namespace http_internal

using http_internal::PlainStream;
using http_internal::Session;
using http_internal::TlsStream;

void HttpServer::Impl::Accept(const std::shared_ptr<Impl>& self) {
  auto socket = std::make_shared<tcp::socket>(net::make_strand(ioc));
  acceptor.async_accept(*socket, [self, socket](beast::error_code ec) {
    if (ec == net::error::operation_aborted || !self->acceptor.is_open()) return;
    if (!ec) self->Opened(socket, self);
    self->Accept(self);
  });
}

void HttpServer::Impl::Opened(const std::shared_ptr<tcp::socket>& socket,
                              const std::shared_ptr<Impl>& self) {
  if (connections.fetch_add(1, std::memory_order_relaxed) >= options.max_connections) {
    connections.fetch_sub(1, std::memory_order_relaxed);
    beast::error_code ignored;
    socket->close(ignored);
    return;
  }
  socket->set_option(tcp::no_delay(true));
  std::shared_ptr<SessionBase> session;
  if (tls != nullptr) {
    std::shared_ptr<SSL_CTX> ctx = tls->Current();
    SSL_CTX_up_ref(ctx.get());  // net::ssl::context frees its own reference
    auto s = std::make_shared<Session<TlsStream>>(self, std::move(*socket), ctx.get());
    session = s;
    s->Start();
  } else {
    auto s = std::make_shared<Session<PlainStream>>(self, std::move(*socket), nullptr);
    session = s;
    s->Start();
  }
  std::lock_guard<std::mutex> l(sessions_mu);
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
  std::lock_guard<std::mutex> l(sessions_mu);
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
  impl->options = options;
  impl->handler = std::move(handler);
  if (!options.tls.cert.empty()) {
    auto tls = TlsServerContext::Create(options.tls, "--tls_cert/--tls_key");
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
  for (int i = 0; i < options.threads; ++i) {
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
}

const char* HttpServer::Scheme() const { return impl_->tls != nullptr ? "https" : "http"; }

}  // namespace tandem
