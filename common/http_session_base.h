#pragma once

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/http_server.h"

namespace tandem {
// The parts of HttpServer (common/http_*.h), shared by its files only. Not anonymous:
// HttpServer::Impl (declared in the public header) holds these types.
namespace http_internal {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

// The steady clock's time since its epoch, in ns.
inline int64_t SteadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// What a session must do on its strand; the exchange posts these.
struct Pending {
  enum Kind { kWhole, kHead, kData, kEnd, kInterim } kind;
  HttpResponse head;  // kWhole, kHead
  std::string bytes;  // kData, kEnd, kInterim
  std::function<void(bool)> done;
  uint64_t exchange = 0;  // which exchange posted it (0: the session itself)
};

// The connection's side that the exchange drives; every virtual method runs on the session's
// strand. The idle state is read by the acceptor, to evict the connection idle the longest.
class SessionBase : public std::enable_shared_from_this<SessionBase> {
 public:
  virtual ~SessionBase() = default;
  virtual net::any_io_executor executor() = 0;
  virtual void Submit(Pending p) = 0;
  virtual void Close() = 0;

  // > 0: idle since then (steady clock, ns; 1 while lingering, to go first); 0: busy;
  // kClaimed: taken for eviction.
  static constexpr int64_t kClaimed = -1;
  std::atomic<int64_t> idle_since{0};
  // Its slot in HttpServer::Impl::connections was given back already (at its eviction).
  std::atomic<bool> slot_released{false};
};

}  // namespace http_internal
}  // namespace tandem
