#pragma once

#include <atomic>
#include <boost/asio.hpp>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/http_server.h"
#include "common/http_session_base.h"
#include "common/tls_server_context.h"

namespace tandem {

// The server's state, shared by its connections (which outlive the HttpServer until they close).
struct HttpServer::Impl {
  HttpServerOptions options;
  Handler handler;
  std::unique_ptr<TlsServerContext> tls;
  boost::asio::io_context ioc;
  // On a strand of its own: Accept's chain and Stop never run at once.
  boost::asio::ip::tcp::acceptor acceptor{boost::asio::make_strand(ioc)};
  std::vector<std::thread> threads;
  std::atomic<int> connections{0};            // sessions holding a slot of options.max_connections
  std::atomic<int> idle{0};                   // of them, idle (SessionBase::idle_since > 0)
  std::atomic<int> refusing{0};               // sessions writing a 503
  std::atomic<int64_t> refused{0};            // connections refused, ever
  std::atomic<int64_t> refused_logged_at{0};  // steady ns of the last log line about them
  absl::Mutex report_mu;
  // options.on_connections_changed until the server is destroyed; its calls serialised.
  std::function<void(int, int)> on_connections_changed ABSL_GUARDED_BY(report_mu);
  absl::Mutex sessions_mu;
  std::list<std::weak_ptr<http_internal::SessionBase>> sessions ABSL_GUARDED_BY(sessions_mu);
  bool stopping ABSL_GUARDED_BY(sessions_mu) = false;

  void Accept(const std::shared_ptr<Impl>& self);
  void Opened(const std::shared_ptr<boost::asio::ip::tcp::socket>& socket,
              const std::shared_ptr<Impl>& self) ABSL_LOCKS_EXCLUDED(sessions_mu);
  // Takes the slot of the connection idle the longest; false when none is idle.
  bool EvictIdle() ABSL_LOCKS_EXCLUDED(sessions_mu);
  void CountRefused();
  // on_connections_changed with the counts read under report_mu, so the last call made has the
  // last counts.
  void ReportConnections() ABSL_LOCKS_EXCLUDED(report_mu);
  // On the io_context: closes the acceptor and every connection.
  void Stop() ABSL_LOCKS_EXCLUDED(sessions_mu);
};

}  // namespace tandem
