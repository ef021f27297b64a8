#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/http_server.h"
#include "common/http_session_base.h"

namespace tandem {
namespace http_internal {

// One request and its answer, as the handler sees it: each call posts a Pending to the session's
// strand, which checks that it comes in turn.
class Exchange final : public HttpExchange {
 public:
  Exchange(std::shared_ptr<SessionBase> session, uint64_t id, HttpRequest request)
      : session_(std::move(session)), id_(id), request_(std::move(request)) {}

  const HttpRequest& request() const override { return request_; }
  void Respond(HttpResponse response) override;
  void StartStream(HttpResponse head) override;
  void Write(std::string bytes, std::function<void(bool ok)> done) override;
  void EndStream(std::string bytes) override;
  void OnClientGone(std::function<void()> fn) override ABSL_LOCKS_EXCLUDED(mu_);
  // The session lost the connection before the exchange ended.
  void Gone() ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t id() const { return id_; }

 private:
  void Post(Pending p);

  const std::shared_ptr<SessionBase> session_;
  const uint64_t id_;
  const HttpRequest request_;
  absl::Mutex mu_;
  bool gone_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> on_gone_ ABSL_GUARDED_BY(mu_);
};

}  // namespace http_internal
}  // namespace tandem
