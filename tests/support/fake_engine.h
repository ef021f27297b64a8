#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/http_server.h"

namespace tandem::testing {

// A scriptable OpenAI-compatible engine on loopback, for the faults a real one shows only by
// accident: loading (503), errors, a hang, a stream cut short, garbage, a slow drip, lies (another
// model, no usage). It replays recorded streams (tests/workers/upstream/fixtures) and serves the
// health, models and metrics endpoints of the profiles.
class FakeEngine {
 public:
  enum class Chat {
    kReplay,    // the stream, event by event (`event_delay` apart); "stream":false: one answer
    kStatus,    // `chat_status` with an OpenAI error body
    kHang,      // headers, then nothing until the test ends
    kTruncate,  // the first half of the stream's events, then the end of the response
    kGarbage,   // bytes that are not an event stream of JSON
  };

  static absl::StatusOr<std::unique_ptr<FakeEngine>> Start();
  ~FakeEngine();

  // HOST:PORT.
  const std::string& address() const { return server_->Address(); }

  void SetHealth(int status) { health_.store(status); }
  // Every endpoint then answers 401 unless the request carries "Authorization: Bearer KEY".
  void RequireKey(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);
  void SetModel(const std::string& id) ABSL_LOCKS_EXCLUDED(mu_);
  // The /metrics body; an empty one answers 500.
  void SetMetrics(const std::string& text) ABSL_LOCKS_EXCLUDED(mu_);
  void SetChat(Chat mode, int status = 200) {
    chat_status_.store(status);
    chat_.store(mode);
  }
  // The SSE body replayed (default: a short answer with usage).
  void SetStream(const std::string& sse) ABSL_LOCKS_EXCLUDED(mu_);
  void SetEventDelay(absl::Duration d) ABSL_LOCKS_EXCLUDED(mu_);

  int chat_requests() const { return chat_requests_.load(); }
  std::string last_chat_body() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  FakeEngine() = default;
  void Handle(std::shared_ptr<HttpExchange> ex) ABSL_LOCKS_EXCLUDED(mu_);
  void ServeChat(std::shared_ptr<HttpExchange> ex) ABSL_LOCKS_EXCLUDED(mu_);

  std::unique_ptr<HttpServer> server_;
  std::atomic<int> health_{200};
  std::atomic<int> chat_status_{200};
  std::atomic<Chat> chat_{Chat::kReplay};
  std::atomic<int> chat_requests_{0};
  mutable absl::Mutex mu_;
  std::string model_ ABSL_GUARDED_BY(mu_) = "fake/model";
  std::string key_ ABSL_GUARDED_BY(mu_);
  std::string metrics_ ABSL_GUARDED_BY(mu_);
  std::string stream_ ABSL_GUARDED_BY(mu_);
  absl::Duration event_delay_ ABSL_GUARDED_BY(mu_);
  std::string last_body_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<HttpExchange>> hung_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> streamers_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stopping_{false};
};

}  // namespace tandem::testing
