#pragma once

#include <atomic>
#include <memory>

#include "router/router.h"

namespace tandem::gateway {

// The live router, swapped atomically on policy reload. Each request takes one snapshot with
// Current() and is decided entirely by it.
class RouterHolder {
 public:
  explicit RouterHolder(std::shared_ptr<const router::Router> router)
      : current_(std::move(router)) {}
  std::shared_ptr<const router::Router> Current() const { return current_.load(); }
  void Swap(std::shared_ptr<const router::Router> router) { current_.store(std::move(router)); }

 private:
  std::atomic<std::shared_ptr<const router::Router>> current_;
};

}  // namespace tandem::gateway
