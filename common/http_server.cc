#include "common/http_server.h"

#include <openssl/ssl.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <deque>
#include <list>
#include <optional>
#include <thread>
#include <type_traits>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
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

// Bytes asked of the socket per read.
constexpr size_t kReadBytes = 16 << 10;
// What a closing connection reads and drops (after its last answer, or while the answer to a
// request that ends the connection is pending), in bytes, and for how long after its answer.
constexpr size_t kMaxDrainBytes = 64 << 10;
constexpr absl::Duration kLingerTimeout = absl::Seconds(2);
// Refusals (503) being written at once; a connection beyond them is closed unanswered.
constexpr int kMaxRefusing = 64;
// The most a request body reserves up front, in bytes: its announced length is only a claim.
constexpr size_t kMaxReserveBytes = 64 << 10;
// A refused connection is logged at most once per this.
constexpr absl::Duration kRefusedLogInterval = absl::Seconds(10);

// Like http::string_body, but the announced Content-Length reserves at most kMaxReserveBytes:
// a client that announces 32 MiB and sends a byte must not cost 32 MiB (the body limit is the
// parser's). Read only: answers are written by the session.
struct GrowingStringBody {
  using value_type = std::string;
  class reader {
   public:
    template <bool isRequest, class Fields>
    reader(http::header<isRequest, Fields>&, value_type& body) : body_(body) {}
    void init(const boost::optional<std::uint64_t>& length, beast::error_code& ec) {
      if (length) body_.reserve(static_cast<size_t>(std::min<uint64_t>(*length, kMaxReserveBytes)));
      ec = {};
    }
    template <class ConstBufferSequence>
    size_t put(const ConstBufferSequence& buffers, beast::error_code& ec) {
      size_t n = 0;
      for (auto it = net::buffer_sequence_begin(buffers); it != net::buffer_sequence_end(buffers);
           ++it) {
        body_.append(static_cast<const char*>(it->data()), it->size());
        n += it->size();
      }
      ec = {};
      return n;
    }
    void finish(beast::error_code& ec) { ec = {}; }

   private:
    value_type& body_;
  };
};

using RequestParser = http::request_parser<GrowingStringBody>;

class SessionBase;

// What a session must do on its strand; the exchange posts these.
struct Pending {
  enum Kind { kWhole, kHead, kData, kEnd, kInterim } kind;
  HttpResponse head;  // kWhole, kHead
  std::string bytes;  // kData, kEnd, kInterim
  std::function<void(bool)> done;
  uint64_t exchange = 0;  // which exchange posted it (0: the session itself)
};

// A request that cannot be served, and what to answer.
struct Refusal {
  int status;
  std::string message;
};

// The connection's side that the exchange drives; every virtual method runs on the session's
// strand. The idle state is read by the acceptor, to evict the connection idle the longest.
class SessionBase : public std::enable_shared_from_this<SessionBase> {
 public:
  virtual ~SessionBase() = default;
  virtual net::any_io_executor executor() = 0;
  virtual void Submit(Pending p) = 0;
  virtual void Close() = 0;

  // > 0: idle since then (steady clock, ns); 0: busy; kClaimed: taken for eviction.
  static constexpr int64_t kClaimed = -1;
  std::atomic<int64_t> idle_since{0};
  // Its slot in HttpServer::Impl::connections was given back already (at its eviction).
  std::atomic<bool> slot_released{false};
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
  std::atomic<int> connections{0};            // sessions holding a slot of options.max_connections
  std::atomic<int> refusing{0};               // sessions writing a 503
  std::atomic<int64_t> refused{0};            // connections refused, ever
  std::atomic<int64_t> refused_logged_at{0};  // steady ns of the last log line about them
  absl::Mutex sessions_mu;
  std::list<std::weak_ptr<SessionBase>> sessions ABSL_GUARDED_BY(sessions_mu);
  bool stopping ABSL_GUARDED_BY(sessions_mu) = false;

  void Accept(const std::shared_ptr<Impl>& self);
  void Opened(const std::shared_ptr<tcp::socket>& socket, const std::shared_ptr<Impl>& self);
  // Takes the slot of the connection idle the longest; false when none is idle.
  bool EvictIdle() ABSL_LOCKS_EXCLUDED(sessions_mu);
  void CountRefused();
  // On the io_context: closes the acceptor and every connection.
  void Stop() ABSL_LOCKS_EXCLUDED(sessions_mu);
};

namespace http_internal {

int64_t SteadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class Exchange final : public HttpExchange {
 public:
  Exchange(std::shared_ptr<SessionBase> session, uint64_t id, HttpRequest request)
      : session_(std::move(session)), id_(id), request_(std::move(request)) {}

  const HttpRequest& request() const override { return request_; }
  void Respond(HttpResponse response) override {
    Post(Pending{Pending::kWhole, std::move(response), {}, {}, id_});
  }
  void StartStream(HttpResponse head) override {
    Post(Pending{Pending::kHead, std::move(head), {}, {}, id_});
  }
  void Write(std::string bytes, std::function<void(bool ok)> done) override {
    Post(Pending{Pending::kData, {}, std::move(bytes), std::move(done), id_});
  }
  void EndStream(std::string bytes) override {
    Post(Pending{Pending::kEnd, {}, std::move(bytes), {}, id_});
  }
  void OnClientGone(std::function<void()> fn) override {
    {
      absl::MutexLock l(&mu_);
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
      absl::MutexLock l(&mu_);
      if (gone_) return;
      gone_ = true;
      fn = std::move(on_gone_);
    }
    if (fn) fn();
  }
  uint64_t id() const { return id_; }

 private:
  void Post(Pending p) {
    net::post(session_->executor(),
              [s = session_, p = std::move(p)]() mutable { s->Submit(std::move(p)); });
  }

  const std::shared_ptr<SessionBase> session_;
  const uint64_t id_;
  const HttpRequest request_;
  absl::Mutex mu_;
  bool gone_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> on_gone_ ABSL_GUARDED_BY(mu_);
};

// The tokens of a comma-separated header list (RFC 9110 section 5.6.1), lower-cased, empty
// elements skipped.
std::vector<std::string> ListTokens(absl::string_view value) {
  std::vector<std::string> out;
  for (absl::string_view t : absl::StrSplit(value, ',')) {
    t = absl::StripAsciiWhitespace(t);
    if (!t.empty()) out.push_back(absl::AsciiStrToLower(t));
  }
  return out;
}

// The path and query of an absolute-form target ("http://host:port/p?q" gives "/p?q" and the
// authority "host:port"); the origin form as it is. RFC 9112 section 3.2.
std::optional<Refusal> NormalizeTarget(absl::string_view method, std::string* target,
                                       std::string* authority) {
  if (absl::StartsWith(*target, "/")) return std::nullopt;
  if (method == "OPTIONS" && *target == "*") return std::nullopt;
  if (method == "CONNECT" && !target->empty()) return std::nullopt;  // the authority form
  const size_t scheme = absl::StartsWithIgnoreCase(*target, "http://")    ? 7
                        : absl::StartsWithIgnoreCase(*target, "https://") ? 8
                                                                          : 0;
  if (scheme > 0) {
    const absl::string_view rest = absl::string_view(*target).substr(scheme);
    const size_t end = std::min(rest.find_first_of("/?"), rest.size());
    *authority = std::string(rest.substr(0, end));
    if (authority->empty()) return Refusal{400, "the absolute request target has no host"};
    const absl::string_view path = rest.substr(end);
    std::string normalized;
    if (path.empty() || path.front() == '?') normalized = "/";
    absl::StrAppend(&normalized, path);
    *target = std::move(normalized);
    return std::nullopt;
  }
  return Refusal{400, "the request target must be a path (/...) or an absolute http(s) URI"};
}

// What the request's line and headers say about it, checked: the version, Host (RFC 9112
// section 3.2) and the body's framing (section 6): a Transfer-Encoding must end in chunked
// (400, the length is unknowable otherwise) and hold nothing else (501), and comes neither with
// Content-Length nor from an HTTP/1.0 client (400). Beast has checked Content-Length.
std::optional<Refusal> CheckHead(const RequestParser& parser, HttpRequest* head) {
  const auto& m = parser.get();
  if (m.version() / 10 != 1) {
    return Refusal{505, "this server speaks HTTP/1.1 (and answers HTTP/1.0)"};
  }
  int hosts = 0, lengths = 0, encodings = 0;
  std::string coding_list;
  for (const auto& [k, v] : head->headers) {
    if (k == "host") ++hosts;
    if (k == "content-length") ++lengths;
    if (k == "transfer-encoding") {
      ++encodings;
      absl::StrAppend(&coding_list, coding_list.empty() ? "" : ",", v);
    }
  }
  if (m.version() == 11 && hosts != 1) {
    return Refusal{
        400, hosts == 0 ? "an HTTP/1.1 request needs a Host header" : "more than one Host header"};
  }
  if (hosts > 1) return Refusal{400, "more than one Host header"};
  std::string authority;
  if (auto r = NormalizeTarget(head->method, &head->target, &authority)) return r;
  if (!authority.empty()) {
    // The absolute form's authority is the request's host (section 3.2.2).
    bool replaced = false;
    for (auto& [k, v] : head->headers) {
      if (k == "host") v = authority, replaced = true;
    }
    if (!replaced) head->headers.emplace_back("host", authority);
  }
  if (encodings == 0) return std::nullopt;
  if (m.version() == 10) return Refusal{400, "Transfer-Encoding in an HTTP/1.0 request"};
  if (lengths > 0) return Refusal{400, "both Transfer-Encoding and Content-Length"};
  const std::vector<std::string> codings = ListTokens(coding_list);
  if (codings.empty() || codings.back() != "chunked") {
    return Refusal{400, "the final transfer coding must be chunked"};
  }
  if (std::count(codings.begin(), codings.end(), "chunked") > 1) {
    return Refusal{400, "chunked applied more than once"};
  }
  if (codings.size() > 1) {
    return Refusal{501, absl::StrCat("transfer coding '", codings.front(),
                                     "' is not supported (only chunked)")};
  }
  // Beast must read the body as chunked too, or the two would disagree on where it ends.
  if (!parser.chunked()) return Refusal{400, "malformed Transfer-Encoding"};
  return std::nullopt;
}

// The request's line and headers, its body left out.
HttpRequest ToHead(const RequestParser& parser) {
  const auto& r = parser.get();
  HttpRequest out;
  out.method = std::string(r.method_string());
  out.target = std::string(r.target());
  out.version = static_cast<int>(r.version());
  for (const auto& f : r) {
    out.headers.emplace_back(
        absl::AsciiStrToLower(absl::string_view(f.name_string().data(), f.name_string().size())),
        std::string(f.value()));
  }
  return out;
}

std::string ErrorJson(absl::string_view message) {
  // Messages are the server's own, without quotes or backslashes.
  return absl::StrCat(R"({"error":{"message":")", message,
                      R"(","type":"invalid_request_error","param":null,"code":null}})");
}

bool IsTokenChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         absl::StrContains("!#$%&'*+-.^_`|~", c);
}

// Whether a handler's header may be sent as it is: a token name, a value without CR, LF or NUL,
// and not one of the framing headers the server writes itself.
bool SendableHeader(absl::string_view name, absl::string_view value) {
  if (name.empty() || !std::all_of(name.begin(), name.end(), IsTokenChar)) return false;
  if (value.find_first_of(absl::string_view("\r\n\0", 3)) != absl::string_view::npos) return false;
  return !absl::EqualsIgnoreCase(name, "content-length") &&
         !absl::EqualsIgnoreCase(name, "transfer-encoding") &&
         !absl::EqualsIgnoreCase(name, "connection");
}

// How an answer's body is delimited.
enum class Framing { kLength, kChunked, kUntilClose, kNone };

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
  // `refusal`: the connection is over the limit; it is answered 503 and closed.
  Session(std::shared_ptr<HttpServer::Impl> server, tcp::socket&& socket, SSL_CTX* ctx,
          bool refusal)
      : server_(std::move(server)),
        holder_(std::move(socket), ctx),
        refusal_(refusal),
        read_timer_(holder_.s.get_executor()),
        write_timer_(holder_.s.get_executor()) {}
  ~Session() override {
    if (refusal_) {
      server_->refusing.fetch_sub(1, std::memory_order_relaxed);
    } else if (!slot_released.load()) {
      server_->connections.fetch_sub(1, std::memory_order_relaxed);
    }
  }

  net::any_io_executor executor() override { return holder_.s.get_executor(); }

  void Start() {
    // The first request's time runs from the accept, the TLS handshake included.
    ArmRead(refusal_ ? server_->options.write_timeout : server_->options.read_timeout);
    if constexpr (Holder::kTls) {
      holder_.s.async_handshake(net::ssl::stream_base::server,
                                [self = Self()](beast::error_code ec) {
                                  if (ec) return self->Close();
                                  self->Begin();
                                });
    } else {
      Begin();
    }
  }

  void Close() override {
    if (closed_) return;
    closed_ = true;
    ++read_gen_;
    ++write_gen_;
    read_timer_.cancel();
    write_timer_.cancel();
    idle_since.store(0);  // not to be chosen for eviction
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
  const HttpServerOptions& options() const { return server_->options; }

  void Begin() {
    if (closed_) return;
    if (refusal_) {
      return Refuse({503, "too many connections; retry later"}, {{"retry-after", "1"}});
    }
    NextRequest();
  }

  // ----- Reading.

  void NextRequest() {
    phase_ = Phase::kHeader;
    started_ = false;
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(options().max_header_bytes));
    parser_->body_limit(static_cast<uint64_t>(options().max_body_bytes));
    ParseHeader();
  }

  void OnRead(beast::error_code ec, size_t n) {
    reading_ = false;
    if (closed_) return;
    buffer_.commit(n);
    if (!Wake()) return Close();  // evicted while idle
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

  void Read() {
    if (reading_ || closed_) return;
    if (read_end_) return OnReadEnd(read_end_);
    reading_ = true;
    holder_.s.async_read_some(
        buffer_.prepare(kReadBytes),
        [self = Self()](beast::error_code ec, size_t n) { self->OnRead(ec, n); });
  }

  // The read ended (the client closed or reset, or the read was cancelled) with nothing unparsed.
  void OnReadEnd(beast::error_code ec) {
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

  // After a request that ends the connection, and after the last answer: what comes is dropped,
  // up to kMaxDrainBytes.
  void Discard() {
    drained_ += buffer_.size();
    buffer_.consume(buffer_.size());
    if (drained_ < kMaxDrainBytes) return Read();
    if (phase_ == Phase::kLinger) Close();  // else: stop reading until the answer is out
  }

  // Leaves `idle`: false when the acceptor took this connection's slot meanwhile.
  bool Wake() {
    int64_t since = idle_since.load();
    while (since > 0) {
      if (idle_since.compare_exchange_weak(since, 0)) return true;
    }
    return since == 0;
  }

  void ParseHeader() {
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

  // Whether the buffered request line ends in a version of the right form ("HTTP/2.0"): Beast
  // refuses all but 1.x alike, and another major version is 505, not 400 (RFC 9110 15.6.6).
  bool WellFormedVersion() const {
    const absl::string_view in(static_cast<const char*>(buffer_.data().data()), buffer_.size());
    const absl::string_view line = in.substr(0, in.find("\r\n"));
    const size_t space = line.rfind(' ');
    if (space == absl::string_view::npos) return false;
    const absl::string_view v = line.substr(space + 1);
    return v.size() == 8 && absl::StartsWith(v, "HTTP/") && absl::ascii_isdigit(v[5]) &&
           v[6] == '.' && absl::ascii_isdigit(v[7]);
  }

  void OnHeader() {
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

  void ParseBody() {
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

  void Dispatch() {
    DisarmRead();
    HttpRequest request = std::move(head_);
    request.body = std::move(parser_->get().body());
    parser_.reset();
    auto exchange =
        std::make_shared<Exchange>(shared_from_this(), ++exchanges_, std::move(request));
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

  static Refusal RefusalFor(beast::error_code ec) {
    if (ec == http::error::body_limit) return {413, ""};
    if (ec == http::error::header_limit) return {431, ""};
    return {400, absl::StrCat("malformed HTTP request: ", ec.message())};
  }

  // A request that cannot be served: answered now, or after the answer in flight (the requests
  // before it are answered first, in order), and the connection closed.
  void RefuseOrDefer(Refusal refusal) {
    if (current_ != nullptr) {
      deferred_ = std::move(refusal);
      phase_ = Phase::kStopped;
      return;
    }
    Refuse(std::move(refusal));
  }

  void Refuse(Refusal refusal, HttpHeaders extra = {}) {
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

  // An answer of the session's own (a refusal, on_headers'), the connection's last.
  void SendOwn(HttpResponse r) {
    phase_ = Phase::kStopped;
    DisarmRead();
    keep_alive_ = false;
    current_ = std::make_shared<Exchange>(shared_from_this(), ++exchanges_, HttpRequest{});
    answer_ = Answer::kNone;
    Submit(Pending{Pending::kWhole, std::move(r), {}, {}, current_->id()});
  }

  // ----- Timeouts.

  void ArmRead(absl::Duration d) {
    const uint64_t gen = ++read_gen_;
    read_timer_.expires_after(absl::ToChronoNanoseconds(d));
    read_timer_.async_wait([self = Self(), gen](beast::error_code ec) {
      if (!ec && gen == self->read_gen_) self->OnReadTimeout();
    });
  }
  void DisarmRead() {
    ++read_gen_;
    read_timer_.cancel();
  }

  void OnReadTimeout() {
    if (closed_) return;
    const bool partial = started_ && (phase_ == Phase::kHeader || phase_ == Phase::kBody) &&
                         current_ == nullptr && queue_.empty();
    if (!partial) return Close();  // idle, lingering, or a handshake that never finished
    // Part of a request came: it is told why it failed. The read in flight is cancelled
    // (kStopped drops its end); nothing is being written.
    phase_ = Phase::kStopped;
    beast::error_code ignored;
    Lowest().socket().cancel(ignored);
    Refuse({408,
            absl::StrCat("the request was not received within ",
                         absl::FormatDuration(options().read_timeout), " (--http_read_timeout)")});
  }

  void ArmWrite() {
    const uint64_t gen = ++write_gen_;
    write_timer_.expires_after(absl::ToChronoNanoseconds(options().write_timeout));
    write_timer_.async_wait([self = Self(), gen](beast::error_code ec) {
      if (!ec && gen == self->write_gen_) self->Close();  // a client that stopped reading
    });
  }

  // ----- Writing.

  // The status line and headers of an answer.
  std::string HeadBytes(const HttpResponse& r, Framing framing, size_t length) {
    const auto reason = http::obsolete_reason(static_cast<http::status>(r.status));
    std::string out = absl::StrCat("HTTP/1.1 ", r.status, " ",
                                   absl::string_view(reason.data(), reason.size()), "\r\n");
    for (const auto& [k, v] : r.headers) {
      if (SendableHeader(k, v)) absl::StrAppend(&out, k, ": ", v, "\r\n");
    }
    if (r.status >= 200) {
      absl::StrAppend(
          &out,
          "Date: ", absl::FormatTime("%a, %d %b %Y %H:%M:%S GMT", absl::Now(), absl::UTCTimeZone()),
          "\r\n");
    }
    if (framing == Framing::kLength) absl::StrAppend(&out, "Content-Length: ", length, "\r\n");
    if (framing == Framing::kChunked) absl::StrAppend(&out, "Transfer-Encoding: chunked\r\n");
    if (!keep_alive_) {
      absl::StrAppend(&out, "Connection: close\r\n");
    } else if (http10_) {
      absl::StrAppend(&out, "Connection: keep-alive\r\n");
    }
    absl::StrAppend(&out, "\r\n");
    return out;
  }

  // Whether the handler's answer asks to close the connection after it.
  static bool SaysClose(const HttpResponse& r) {
    for (const auto& [k, v] : r.headers) {
      if (!absl::EqualsIgnoreCase(k, "connection")) continue;
      const std::vector<std::string> tokens = ListTokens(v);
      if (std::find(tokens.begin(), tokens.end(), "close") != tokens.end()) return true;
    }
    return false;
  }

  void WriteNext() {
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
        out_ = HeadBytes(p.head, bodiless ? Framing::kNone : Framing::kLength, p.head.body.size());
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
        out_ = HeadBytes(p.head, http10_ ? Framing::kUntilClose : Framing::kChunked, 0);
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

  void OnWritten(beast::error_code ec) {
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

  void EndExchange() {
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
          idle_since.store(SteadyNanos());
        }
        return Read();
      default:
        return;
    }
  }

  // The connection's end after its last answer: our side is shut, and what the client still
  // sends is dropped for a moment. Closing with unread input would make the kernel reset the
  // connection, which can destroy the answer before the client reads it.
  void Linger() {
    phase_ = Phase::kLinger;
    drained_ = 0;
    buffer_.consume(buffer_.size());
    ArmRead(std::min(kLingerTimeout, options().read_timeout));
    beast::error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
    Read();
  }

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
    oldest->slot_released.store(true);
    connections.fetch_sub(1, std::memory_order_relaxed);
    net::post(oldest->executor(), [oldest] { oldest->Close(); });
    return true;
  }
  return false;
}

void HttpServer::Impl::CountRefused() {
  const int64_t n = refused.fetch_add(1) + 1;
  if (options.on_connection_refused) options.on_connection_refused();
  const int64_t now = http_internal::SteadyNanos();
  int64_t last = refused_logged_at.load();
  if ((last == 0 || now - last >= absl::ToInt64Nanoseconds(http_internal::kRefusedLogInterval)) &&
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
    if (refusing.fetch_add(1, std::memory_order_relaxed) >= http_internal::kMaxRefusing) {
      refusing.fetch_sub(1, std::memory_order_relaxed);
      beast::error_code ignored;
      socket->close(ignored);
      return;
    }
  }
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
