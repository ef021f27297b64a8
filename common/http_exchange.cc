#include "common/http_exchange.h"

#include <utility>

namespace tandem {
namespace http_internal {

void Exchange::Respond(HttpResponse response) {
  Post(Pending{Pending::kWhole, std::move(response), {}, {}, id_});
}

void Exchange::StartStream(HttpResponse head) {
  Post(Pending{Pending::kHead, std::move(head), {}, {}, id_});
}

void Exchange::Write(std::string bytes, std::function<void(bool ok)> done) {
  Post(Pending{Pending::kData, {}, std::move(bytes), std::move(done), id_});
}

void Exchange::EndStream(std::string bytes) {
  Post(Pending{Pending::kEnd, {}, std::move(bytes), {}, id_});
}

void Exchange::OnClientGone(std::function<void()> fn) {
  {
    absl::MutexLock l(&mu_);
    if (!gone_) {
      on_gone_ = std::move(fn);
      return;
    }
  }
  fn();
}

void Exchange::Gone() {
  std::function<void()> fn;
  {
    absl::MutexLock l(&mu_);
    if (gone_) return;
    gone_ = true;
    fn = std::move(on_gone_);
  }
  if (fn) fn();
}

void Exchange::Post(Pending p) {
  net::post(session_->executor(),
            [s = session_, p = std::move(p)]() mutable { s->Submit(std::move(p)); });
}

}  // namespace http_internal
}  // namespace tandem
