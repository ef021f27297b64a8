#pragma once

#include <openssl/ssl.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "common/http_exchange.h"
#include "common/http_request_parsing.h"
#include "common/http_server.h"
#include "common/http_session_base.h"

namespace tandem {
namespace http_internal {

// The connection's stream, plain or TLS: the Holder of a Session.
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

// One connection: reads its requests, hands each to the server's handler with its Exchange, and
// writes the answers in the order of the requests. Everything runs on the connection's strand.
// Defined (and instantiated for PlainStream and TlsStream) in http_session.cc.
template <class Holder>
class Session final : public SessionBase {
 public:
  // `refusal`: the connection is over the limit; it is answered 503 and closed.
  Session(std::shared_ptr<HttpServer::Impl> server, tcp::socket&& socket, SSL_CTX* ctx,
          bool refusal);
  ~Session() override;

  net::any_io_executor executor() override { return holder_.s.get_executor(); }

  void Start();
  void Close() override;
  // Gives its slot in HttpServer::Impl::connections back, once (not for a refusal).
  void ReleaseSlot();
  void Submit(Pending p) override;

 private:
  enum class Phase {
    kHeader,   // reading a request's line and headers
    kTurn,     // its headers are read; it waits for the answer in flight to end
    kBody,     // reading its body (no answer in flight)
    kDiscard,  // the request in flight ends the connection: reading only to notice the client go
    kStopped,  // not reading: an answer of the session's own is pending
    kLinger,   // the last answer is written and our side shut: dropping what the client sends
  };
  enum class Answer { kNone, kStreaming, kEnded };

  std::shared_ptr<Session> Self() { return std::static_pointer_cast<Session>(shared_from_this()); }
  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(holder_.s); }
  const HttpServerOptions& options() const;

  void Begin();

  // ----- Reading.

  void NextRequest();
  void OnRead(beast::error_code ec, size_t n);
  void Read();
  // The read ended (the client closed or reset, or the read was cancelled) with nothing unparsed.
  void OnReadEnd(beast::error_code ec);
  // After a request that ends the connection, and after the last answer: what comes is dropped,
  // up to kMaxDrainBytes.
  void Discard();
  // Leaves `idle`: false when the acceptor took this connection's slot meanwhile.
  bool Wake();
  void ParseHeader();
  // Whether the buffered request line ends in a version of the right form ("HTTP/2.0"): Beast
  // refuses all but 1.x alike, and another major version is 505, not 400 (RFC 9110 15.6.6).
  bool WellFormedVersion() const;
  void OnHeader();
  void ParseBody();
  void Dispatch();
  // A request that cannot be served: answered now, or after the answer in flight (the requests
  // before it are answered first, in order), and the connection closed.
  void RefuseOrDefer(Refusal refusal);
  void Refuse(Refusal refusal, HttpHeaders extra = {});
  // An answer of the session's own (a refusal, on_headers'), the connection's last.
  void SendOwn(HttpResponse r);

  // ----- Timeouts.

  void ArmRead(absl::Duration d);
  void DisarmRead();
  void OnReadTimeout();
  void ArmWrite();

  // ----- Writing.

  void WriteNext();
  void OnWritten(beast::error_code ec);
  void EndExchange();
  // The connection's end after its last answer: our side is shut, and what the client still
  // sends is dropped for a moment. Closing with unread input would make the kernel reset the
  // connection, which can destroy the answer before the client reads it.
  // Evictable from now (`since`: steady ns, or 1 to go first), counted in the server's idle.
  void MarkIdle(int64_t since);
  void Linger();

  const std::shared_ptr<HttpServer::Impl> server_;
  Holder holder_;
  const bool refusal_;
  net::steady_timer read_timer_;
  net::steady_timer write_timer_;
  uint64_t read_gen_ = 0;   // a read timer's wait counts only if no later arming came
  uint64_t write_gen_ = 0;  // likewise for the write timer
  beast::flat_buffer buffer_;
  std::optional<RequestParser> parser_;
  Phase phase_ = Phase::kHeader;
  bool started_ = false;  // bytes of the request being read came
  HttpRequest head_;      // the request being read, from its headers
  std::optional<Refusal> deferred_;
  beast::error_code read_end_;  // how the connection's reading ended (the client closed, reset)
  size_t drained_ = 0;
  std::shared_ptr<Exchange> current_;  // the exchange in flight (answer not written yet)
  uint64_t exchanges_ = 0;
  Answer answer_ = Answer::kNone;
  bool keep_alive_ = true;
  bool head_only_ = false;   // the exchange in flight answers HEAD
  bool http10_ = false;      // its client speaks HTTP/1.0
  bool raw_stream_ = false;  // its stream is not chunked (HTTP/1.0)
  bool reading_ = false;
  bool writing_ = false;
  bool closed_ = false;
  std::deque<Pending> queue_;
  std::string out_;  // the head or chunk size line of the write in flight
  std::vector<net::const_buffer> bufs_;
};

extern template class Session<PlainStream>;
extern template class Session<TlsStream>;

}  // namespace http_internal
}  // namespace tandem
