#include "common/http_session.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/http_response_writing.h"
#include "common/http_server_impl.h"

namespace tandem {
namespace http_internal {

// Bytes asked of the socket per read.
constexpr size_t kReadBytes = 16 << 10;
// What a closing connection reads and drops (after its last answer, or while the answer to a
// request that ends the connection is pending), in bytes, and for how long after its answer.
constexpr size_t kMaxDrainBytes = 64 << 10;
constexpr absl::Duration kLingerTimeout = absl::Seconds(2);

template <class Holder>
Session<Holder>::Session(std::shared_ptr<HttpServer::Impl> server, tcp::socket&& socket,
                         SSL_CTX* ctx, bool refusal)
    : server_(std::move(server)),
      holder_(std::move(socket), ctx),
      refusal_(refusal),
      read_timer_(holder_.s.get_executor()),
      write_timer_(holder_.s.get_executor()) {}

template <class Holder>
Session<Holder>::~Session() {
  if (refusal_) {
    server_->refusing.fetch_sub(1, std::memory_order_relaxed);
  } else {
    ReleaseSlot();
  }
}

template <class Holder>
void Session<Holder>::ReleaseSlot() {
  // Once, whoever comes first: this, or the acceptor evicting the connection.
  if (!refusal_ && !slot_released.exchange(true)) {
    server_->connections.fetch_sub(1, std::memory_order_relaxed);
    server_->ReportConnections();
  }
}

template <class Holder>
void Session<Holder>::Start() {
  // The first request's time runs from the accept, the TLS handshake included.
  ArmRead(refusal_ ? server_->options.write_timeout : server_->options.read_timeout);
  if constexpr (Holder::kTls) {
    holder_.s.async_handshake(net::ssl::stream_base::server, [self = Self()](beast::error_code ec) {
      if (ec) return self->Close();
      self->Begin();
    });
  } else {
    Begin();
  }
}

template <class Holder>
void Session<Holder>::Close() {
  if (closed_) return;
  closed_ = true;
  ++read_gen_;
  ++write_gen_;
  read_timer_.cancel();
  write_timer_.cancel();
  // Not to be chosen for eviction (one claimed for it was counted out of idle then).
  if (idle_since.exchange(0) > 0) {
    server_->idle.fetch_sub(1, std::memory_order_relaxed);
    server_->ReportConnections();
  }
  // A closing connection serves no one: its slot goes to the next now, not when its last write
  // and handlers are done (an idle timeout would otherwise refuse a new client meanwhile, with
  // nothing left to evict).
  ReleaseSlot();
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

template <class Holder>
void Session<Holder>::Submit(Pending p) {
  const bool whole = p.kind == Pending::kWhole || p.kind == Pending::kHead;
  // Only the exchange in flight answers, once, and a stream's data follows its head.
  const bool in_turn = current_ != nullptr && p.exchange == current_->id() &&
                       (whole ? answer_ == Answer::kNone : answer_ == Answer::kStreaming);
  if (closed_ || !in_turn) {
    if (p.done) p.done(false);
    return;
  }
  if (p.kind == Pending::kHead) answer_ = Answer::kStreaming;
  if (p.kind == Pending::kWhole || p.kind == Pending::kEnd) answer_ = Answer::kEnded;
  queue_.push_back(std::move(p));
  if (!writing_) WriteNext();
}

template <class Holder>
const HttpServerOptions& Session<Holder>::options() const {
  return server_->options;
}

template <class Holder>
void Session<Holder>::Begin() {
  if (closed_) return;
  if (refusal_) {
    return Refuse({503, "too many connections; retry later"}, {{"retry-after", "1"}});
  }
  NextRequest();
}

// ----- Reading.

template <class Holder>
void Session<Holder>::NextRequest() {
  phase_ = Phase::kHeader;
  started_ = false;
  parser_.emplace();
  parser_->header_limit(static_cast<uint32_t>(options().max_header_bytes));
  parser_->body_limit(static_cast<uint64_t>(options().max_body_bytes));
  ParseHeader();
}

template <class Holder>
void Session<Holder>::OnRead(beast::error_code ec, size_t n) {
  reading_ = false;
  if (closed_) return;
  buffer_.commit(n);
  // Evicted while idle. A lingering connection stays evictable whatever it reads.
  if (phase_ != Phase::kLinger && !Wake()) return Close();
  // Aborted: by Close, or by a read timeout that answers 408 (kStopped).
  if (ec == net::error::operation_aborted) return;
  if (ec) read_end_ = ec;  // what is buffered is parsed first; Read() then ends the reading
  switch (phase_) {
    case Phase::kHeader:
      return ParseHeader();
    case Phase::kBody:
      return ParseBody();
    case Phase::kDiscard:
    case Phase::kLinger:
      return Discard();
    case Phase::kTurn:
    case Phase::kStopped:
      return;
  }
}

template <class Holder>
void Session<Holder>::Read() {
  if (reading_ || closed_) return;
  if (read_end_) return OnReadEnd(read_end_);
  reading_ = true;
  holder_.s.async_read_some(
      buffer_.prepare(kReadBytes),
      [self = Self()](beast::error_code ec, size_t n) { self->OnRead(ec, n); });
}

template <class Holder>
void Session<Holder>::OnReadEnd(beast::error_code ec) {
  const bool eof = ec == net::error::eof || ec == net::ssl::error::stream_truncated;
  const bool mid_request = (phase_ == Phase::kHeader && started_) || phase_ == Phase::kBody;
  if (eof && mid_request) {
    // Bytes of a request and then the end: an incomplete request, not a client that left
    // between requests; the answer in flight still goes out, then this 400.
    return RefuseOrDefer({400, "the connection ended mid-request"});
  }
  // Gone: between requests, while an answer was pending (OnClientGone), or lingering.
  Close();
}

template <class Holder>
void Session<Holder>::Discard() {
  drained_ += buffer_.size();
  buffer_.consume(buffer_.size());
  if (drained_ < kMaxDrainBytes) return Read();
  if (phase_ == Phase::kLinger) Close();  // else: stop reading until the answer is out
}

template <class Holder>
bool Session<Holder>::Wake() {
  int64_t since = idle_since.load();
  while (since > 0) {
    if (idle_since.compare_exchange_weak(since, 0)) {
      server_->idle.fetch_sub(1, std::memory_order_relaxed);
      server_->ReportConnections();
      return true;
    }
  }
  return since == 0;
}

template <class Holder>
void Session<Holder>::ParseHeader() {
  if (!started_) {
    // Empty lines before a request line are ignored (RFC 9112 section 2.2).
    while (buffer_.size() > 0) {
      const absl::string_view in(static_cast<const char*>(buffer_.data().data()), buffer_.size());
      if (absl::StartsWith(in, "\n")) {
        buffer_.consume(1);
      } else if (absl::StartsWith(in, "\r\n")) {
        buffer_.consume(2);
      } else if (in == "\r") {
        return Read();  // perhaps an empty line: wait for its LF
      } else {
        break;
      }
    }
    if (buffer_.size() == 0) return Read();
    started_ = true;
    // A later request's time runs from its first byte (the first one's from the accept);
    // while an answer is pending it has none (EndExchange gives it one).
    if (current_ == nullptr && exchanges_ > 0) ArmRead(options().read_timeout);
  }
  beast::error_code ec;
  const size_t used = parser_->put(buffer_.data(), ec);
  buffer_.consume(used);
  if (ec == http::error::need_more) return Read();
  if (ec == http::error::bad_version && WellFormedVersion()) {
    return RefuseOrDefer({505, "this server speaks HTTP/1.1 (and answers HTTP/1.0)"});
  }
  if (ec) return RefuseOrDefer(RefusalFor(ec));
  OnHeader();
}

template <class Holder>
bool Session<Holder>::WellFormedVersion() const {
  const absl::string_view in(static_cast<const char*>(buffer_.data().data()), buffer_.size());
  const absl::string_view line = in.substr(0, in.find("\r\n"));
  const size_t space = line.rfind(' ');
  if (space == absl::string_view::npos) return false;
  const absl::string_view v = line.substr(space + 1);
  return v.size() == 8 && absl::StartsWith(v, "HTTP/") && absl::ascii_isdigit(v[5]) &&
         v[6] == '.' && absl::ascii_isdigit(v[7]);
}

template <class Holder>
void Session<Holder>::OnHeader() {
  if (current_ != nullptr) {
    phase_ = Phase::kTurn;  // read on once the answer in flight is out
    return;
  }
  head_ = ToHead(*parser_);
  if (auto refusal = CheckHead(*parser_, &head_)) return Refuse(*refusal);
  keep_alive_ = parser_->keep_alive();
  head_only_ = head_.method == "HEAD";
  http10_ = head_.version == 10;
  const absl::string_view expect = head_.Header("expect");
  const bool has_expect = std::any_of(head_.headers.begin(), head_.headers.end(),
                                      [](const auto& h) { return h.first == "expect"; });
  // An HTTP/1.0 client's expectation is ignored (RFC 9110 section 10.1.1).
  if (has_expect && !http10_ && !absl::EqualsIgnoreCase(expect, "100-continue")) {
    return Refuse({417, "the only expectation served is 100-continue"});
  }
  if (options().on_headers) {
    if (std::optional<HttpResponse> r = options().on_headers(head_)) {
      keep_alive_ = false;
      return SendOwn(std::move(*r));
    }
  }
  phase_ = Phase::kBody;
  const bool body = parser_->chunked() || parser_->content_length().value_or(0) > 0;
  // A client that waits for 100 Continue sent none of the body yet; one that sent some does
  // not need it (section 10.1.1 lets a server leave it out then).
  if (has_expect && !http10_ && body && !parser_->is_done() && buffer_.size() == 0) {
    queue_.push_back(Pending{Pending::kInterim, {}, "HTTP/1.1 100 Continue\r\n\r\n", {}, 0});
    if (!writing_) WriteNext();
  }
  ParseBody();
}

template <class Holder>
void Session<Holder>::ParseBody() {
  while (!parser_->is_done() && buffer_.size() > 0) {
    beast::error_code ec;
    const size_t used = parser_->put(buffer_.data(), ec);
    buffer_.consume(used);
    if (ec == http::error::need_more) break;
    if (ec) return Refuse(RefusalFor(ec));
    if (used == 0) break;
  }
  if (!parser_->is_done()) return Read();
  Dispatch();
}

template <class Holder>
void Session<Holder>::Dispatch() {
  DisarmRead();
  HttpRequest request = std::move(head_);
  request.body = std::move(parser_->get().body());
  parser_.reset();
  auto exchange = std::make_shared<Exchange>(shared_from_this(), ++exchanges_, std::move(request));
  current_ = exchange;
  answer_ = Answer::kNone;
  if (keep_alive_) {
    // The next request is read while this one is answered (its headers at most), so that a
    // client that leaves is noticed; none has a timeout until this answer is out.
    NextRequest();
  } else {
    // Nothing after a request that ends the connection is a request (RFC 9112 section 9.6).
    phase_ = Phase::kDiscard;
    drained_ = 0;
    buffer_.consume(buffer_.size());
    Read();
  }
  server_->handler(std::move(exchange));
}

template <class Holder>
void Session<Holder>::RefuseOrDefer(Refusal refusal) {
  if (current_ != nullptr) {
    deferred_ = std::move(refusal);
    phase_ = Phase::kStopped;
    return;
  }
  Refuse(std::move(refusal));
}

template <class Holder>
void Session<Holder>::Refuse(Refusal refusal, HttpHeaders extra) {
  if (refusal.status == 413) {
    refusal.message = absl::StrCat("the request body exceeds ", options().max_body_bytes,
                                   " bytes (--max_request_bytes)");
  } else if (refusal.status == 431) {
    refusal.message = absl::StrCat("the request headers exceed ", options().max_header_bytes,
                                   " bytes (--http_max_header_bytes)");
  }
  keep_alive_ = false;
  HttpResponse r{refusal.status, std::move(extra), ErrorJson(refusal.message)};
  r.headers.emplace_back("content-type", "application/json");
  SendOwn(std::move(r));
}

template <class Holder>
void Session<Holder>::SendOwn(HttpResponse r) {
  phase_ = Phase::kStopped;
  DisarmRead();
  keep_alive_ = false;
  current_ = std::make_shared<Exchange>(shared_from_this(), ++exchanges_, HttpRequest{});
  answer_ = Answer::kNone;
  Submit(Pending{Pending::kWhole, std::move(r), {}, {}, current_->id()});
}

// ----- Timeouts.

template <class Holder>
void Session<Holder>::ArmRead(absl::Duration d) {
  const uint64_t gen = ++read_gen_;
  read_timer_.expires_after(absl::ToChronoNanoseconds(d));
  read_timer_.async_wait([self = Self(), gen](beast::error_code ec) {
    if (!ec && gen == self->read_gen_) self->OnReadTimeout();
  });
}

template <class Holder>
void Session<Holder>::DisarmRead() {
  ++read_gen_;
  read_timer_.cancel();
}

template <class Holder>
void Session<Holder>::OnReadTimeout() {
  if (closed_) return;
  const bool partial = started_ && (phase_ == Phase::kHeader || phase_ == Phase::kBody) &&
                       current_ == nullptr && queue_.empty();
  if (!partial) return Close();  // idle, lingering, or a handshake that never finished
  // Part of a request came: it is told why it failed. The read in flight is cancelled
  // (kStopped drops its end); nothing is being written.
  phase_ = Phase::kStopped;
  beast::error_code ignored;
  Lowest().socket().cancel(ignored);
  Refuse(
      {408, absl::StrCat("the request was not received within ",
                         absl::FormatDuration(options().read_timeout), " (--http_read_timeout)")});
}

template <class Holder>
void Session<Holder>::ArmWrite() {
  const uint64_t gen = ++write_gen_;
  write_timer_.expires_after(absl::ToChronoNanoseconds(options().write_timeout));
  write_timer_.async_wait([self = Self(), gen](beast::error_code ec) {
    if (!ec && gen == self->write_gen_) self->Close();  // a client that stopped reading
  });
}

// ----- Writing.

template <class Holder>
void Session<Holder>::WriteNext() {
  if (closed_ || queue_.empty()) {
    writing_ = false;
    return;
  }
  writing_ = true;
  Pending& p = queue_.front();
  bufs_.clear();
  switch (p.kind) {
    case Pending::kInterim:
      bufs_.push_back(net::buffer(p.bytes));
      break;
    case Pending::kWhole: {
      if (p.head.status < 200 || p.head.status > 999) p.head.status = 500;
      if (SaysClose(p.head)) keep_alive_ = false;
      const bool bodiless = p.head.status == 204 || p.head.status == 304;
      out_ = HeadBytes(p.head, bodiless ? Framing::kNone : Framing::kLength, p.head.body.size(),
                       keep_alive_, http10_);
      bufs_.push_back(net::buffer(out_));
      if (!bodiless && !head_only_) bufs_.push_back(net::buffer(p.head.body));
      break;
    }
    case Pending::kHead: {
      if (p.head.status < 200 || p.head.status > 999) p.head.status = 500;
      if (SaysClose(p.head)) keep_alive_ = false;
      // An HTTP/1.0 client knows no chunks: the bytes as they are, ended by the close.
      if (http10_) keep_alive_ = false;
      raw_stream_ = http10_;
      out_ = HeadBytes(p.head, http10_ ? Framing::kUntilClose : Framing::kChunked, 0, keep_alive_,
                       http10_);
      bufs_.push_back(net::buffer(out_));
      break;
    }
    case Pending::kData:
    case Pending::kEnd:
      if (!head_only_ && !p.bytes.empty()) {
        if (!raw_stream_) {
          out_ = absl::StrCat(absl::Hex(p.bytes.size()), "\r\n");
          bufs_.push_back(net::buffer(out_));
        }
        bufs_.push_back(net::buffer(p.bytes));
        if (!raw_stream_) bufs_.push_back(net::buffer("\r\n", 2));
      }
      if (p.kind == Pending::kEnd && !head_only_ && !raw_stream_) {
        bufs_.push_back(net::buffer("0\r\n\r\n", 5));
      }
      break;
  }
  if (bufs_.empty()) {
    // Nothing to send (HEAD, an empty write): done, on a later turn of the strand.
    return net::post(executor(), [self = Self()] { self->OnWritten({}); });
  }
  ArmWrite();
  net::async_write(holder_.s, bufs_,
                   [self = Self()](beast::error_code ec, size_t) { self->OnWritten(ec); });
}

template <class Holder>
void Session<Holder>::OnWritten(beast::error_code ec) {
  ++write_gen_;
  write_timer_.cancel();
  Pending p = std::move(queue_.front());
  queue_.pop_front();
  writing_ = false;
  if (ec || closed_) {
    Close();
    if (p.done) p.done(false);
    return;
  }
  if (p.done) p.done(true);
  if (p.kind == Pending::kEnd || p.kind == Pending::kWhole) EndExchange();
  if (!writing_) WriteNext();
}

template <class Holder>
void Session<Holder>::EndExchange() {
  current_.reset();
  answer_ = Answer::kNone;
  head_only_ = false;
  raw_stream_ = false;
  if (!keep_alive_) return Linger();
  if (deferred_.has_value()) {
    Refusal r = std::move(*deferred_);
    deferred_.reset();
    return Refuse(std::move(r));
  }
  switch (phase_) {
    case Phase::kTurn:
      ArmRead(options().read_timeout);  // for its body
      return OnHeader();
    case Phase::kHeader:
      // The next request's time starts: its own from its first byte, or the idle time.
      if (started_) {
        ArmRead(options().read_timeout);
      } else {
        ArmRead(options().idle_timeout);
        MarkIdle(SteadyNanos());
      }
      return Read();
    default:
      return;
  }
}

template <class Holder>
void Session<Holder>::MarkIdle(int64_t since) {
  int64_t seen = 0;
  if (idle_since.compare_exchange_strong(seen, since)) {
    server_->idle.fetch_add(1, std::memory_order_relaxed);
    server_->ReportConnections();
  } else if (seen > 0) {
    idle_since.compare_exchange_strong(seen, since);  // idle already; one claimed stays claimed
  }
}

template <class Holder>
void Session<Holder>::Linger() {
  phase_ = Phase::kLinger;
  drained_ = 0;
  buffer_.consume(buffer_.size());
  ArmRead(std::min(kLingerTimeout, options().read_timeout));
  // It serves no one now (the answer is out, our side shut): a full server takes its slot
  // before any idle connection's, as the oldest idle time there is.
  MarkIdle(1);
  beast::error_code ignored;
  Lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
  Read();
}

template class Session<PlainStream>;
template class Session<TlsStream>;

}  // namespace http_internal
}  // namespace tandem
