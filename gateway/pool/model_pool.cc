#include "gateway/pool/model_pool.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/grpc_status.h"
#include "gateway/metrics/gateway_metrics.h"
#include "spdlog/spdlog.h"

namespace tandem::gateway {

void ModelPool::AddEndpoint(std::unique_ptr<WorkerClient> client) {
  absl::MutexLock l(&write_mu_);
  auto next = std::make_shared<EndpointList>(*endpoints_.load());
  next->push_back(std::make_shared<Endpoint>(name_, std::move(client), options_, metrics_));
  endpoints_.store(std::move(next));
}

bool ModelPool::SetAddresses(const std::vector<std::string>& addresses,
                             const ClientFactory& factory) {
  absl::MutexLock l(&write_mu_);
  const auto current = endpoints_.load();
  auto next = std::make_shared<EndpointList>();
  bool changed = current->size() != addresses.size();
  for (const std::string& a : addresses) {
    auto it = std::find_if(current->begin(), current->end(),
                           [&](const auto& e) { return e->address() == a; });
    if (it != current->end()) {
      next->push_back(*it);
    } else {
      next->push_back(std::make_shared<Endpoint>(name_, factory(a), options_, metrics_));
      changed = true;
    }
  }
  if (changed) endpoints_.store(std::move(next));
  return changed;
}

absl::StatusOr<PickStrategy> ParsePickStrategy(absl::string_view name) {
  if (name == "least_outstanding") return PickStrategy::kLeastOutstanding;
  if (name == "power_of_two") return PickStrategy::kPowerOfTwo;
  if (name == "prefix") return PickStrategy::kPrefix;
  if (name == "round_robin") return PickStrategy::kRoundRobin;
  return absl::InvalidArgumentError(
      absl::StrCat("'", name, "' is not least_outstanding, power_of_two, round_robin or prefix"));
}

namespace {
// Live load: the worker's own queue at its last scrape, plus what this gateway sent since.
int64_t LiveLoad(const Endpoint* e) {
  return std::max<int64_t>(0, e->scraped_load()) + e->outstanding();
}
}  // namespace

Endpoint* ModelPool::PickByPrefix(const std::vector<Endpoint*>& usable, const PromptPrefix& prefix,
                                  PickInfo* info) const {
  int64_t least = INT64_MAX;
  for (const Endpoint* e : usable) least = std::min(least, LiveLoad(e));
  Endpoint* best = nullptr;
  int64_t best_hit = -1, best_load = 0;
  for (Endpoint* e : usable) {
    const int64_t load = LiveLoad(e);
    if (load > least + prefix_options_.max_imbalance) continue;
    int64_t hit = prefix_index_.HitTokens(prefix, e->address());
    if (hit < prefix_options_.min_hit_tokens) hit = 0;
    if (hit > best_hit || (hit == best_hit && load < best_load)) {
      best = e;
      best_hit = hit;
      best_load = load;
    }
  }
  info->rule = best_hit > 0 ? "prefix" : "load";
  info->prefix_hit_tokens = std::max<int64_t>(best_hit, 0);
  return best;
}

int64_t ModelPool::ExpectedHitTokens(const PromptPrefix& prefix) const {
  int64_t best = 0;
  if (prefix.empty()) return best;
  for (const auto& e : *endpoints_.load()) {
    if (!e->usable()) continue;
    const int64_t hit = prefix_index_.HitTokens(prefix, e->address());
    if (hit >= prefix_options_.min_hit_tokens) best = std::max(best, hit);
  }
  return best;
}

absl::StatusOr<std::shared_ptr<Endpoint>> ModelPool::Pick(
    PickStrategy strategy, const std::vector<const Endpoint*>& exclude, const PromptPrefix* prefix,
    PickInfo* info) const {
  PickInfo ignored;
  if (info == nullptr) info = &ignored;
  const auto list = endpoints_.load();
  // A handful of replicas: a linear scan over the snapshot.
  std::vector<Endpoint*> usable;
  usable.reserve(list->size());
  for (const auto& e : *list) {
    if (e->usable() && std::find(exclude.begin(), exclude.end(), e.get()) == exclude.end()) {
      usable.push_back(e.get());
    }
  }
  Endpoint* best = nullptr;
  const bool has_prefix = prefix != nullptr && !prefix->empty();
  if (strategy == PickStrategy::kPrefix && has_prefix) {
    best = PickByPrefix(usable, *prefix, info);
  } else if (strategy == PickStrategy::kRoundRobin && !usable.empty()) {
    info->rule = "round_robin";
    best = usable[next_turn_.fetch_add(1, std::memory_order_relaxed) % usable.size()];
  } else if (strategy == PickStrategy::kPowerOfTwo && usable.size() > 2) {
    info->rule = "random2";
    thread_local std::minstd_rand rng{std::random_device{}()};
    const size_t a = rng() % usable.size();
    size_t b = rng() % (usable.size() - 1);
    if (b >= a) ++b;
    best = LiveLoad(usable[a]) <= LiveLoad(usable[b]) ? usable[a] : usable[b];
  } else {
    for (Endpoint* e : usable) {
      if (best == nullptr || e->outstanding() < best->outstanding()) best = e;
    }
  }
  if (best != nullptr && has_prefix) prefix_index_.Record(*prefix, best->address());
  if (best != nullptr && metrics_ != nullptr) {
    metrics_->CountPick(name_, info->rule, info->prefix_hit_tokens);
  }
  if (best != nullptr) {
    for (const auto& e : *list) {
      if (e.get() == best) return e;
    }
  }
  std::vector<std::string> reasons;
  for (const auto& e : *list) {
    const bool excluded = std::find(exclude.begin(), exclude.end(), e.get()) != exclude.end();
    reasons.push_back(absl::StrCat(
        e->address(), ": ", excluded ? "already failed this request" : e->not_ready_reason()));
  }
  if (list->empty()) reasons.push_back("no endpoints (DNS gave no addresses?)");
  return absl::UnavailableError(absl::StrCat("model '", name_, "' has no usable worker (",
                                             absl::StrJoin(reasons, "; "), ")"));
}

int ModelPool::DispatchCapacity(int headroom) const {
  int64_t total = 0;
  for (const auto& e : *endpoints_.load()) {
    if (!e->usable()) continue;
    const tandem::v1::WorkerInfo info = e->info();
    const int batch = info.load().max_batch_size();
    // Never beyond the worker's own admission queue: what it would refuse stays here.
    const int queue = info.load().max_queue();
    if (batch > 0) total += batch + (headroom >= 0 ? std::min(headroom, queue) : queue);
  }
  return static_cast<int>(std::min<int64_t>(total, INT32_MAX));
}

int ModelPool::ReadyCount() const {
  int n = 0;
  for (const auto& e : *endpoints_.load()) n += e->usable() ? 1 : 0;
  return n;
}

tandem::v1::ModelStatus ModelPool::Status() const {
  const auto list = endpoints_.load();
  tandem::v1::ModelStatus s;
  s.set_name(name_);
  s.set_total_workers(static_cast<int32_t>(list->size()));
  s.set_ready_workers(ReadyCount());
  // Prefer a ready endpoint's view; otherwise any endpoint that was ever seen.
  for (int pass = 0; pass < 2 && s.model_id().empty(); ++pass) {
    for (const auto& e : *list) {
      if (pass == 0 && !e->ready()) continue;
      tandem::v1::WorkerInfo info = e->info();
      if (info.model_id().empty()) continue;
      s.set_model_id(info.model_id());
      s.set_engine(info.engine());
      auto* c = s.mutable_capabilities();
      c->set_vision(info.vision());
      c->set_max_context_tokens(info.max_context_tokens());
      c->set_max_output_tokens(info.max_output_tokens());
      c->set_reasoning(info.reasoning());
      break;
    }
  }
  return s;
}

ModelFacts ModelPool::Facts() const {
  const auto list = endpoints_.load();
  // As Status: a ready endpoint's view first, otherwise any endpoint that was ever seen.
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& e : *list) {
      if (pass == 0 && !e->ready()) continue;
      const ModelFacts f = e->facts();
      if (f.known) return f;
    }
  }
  return ModelFacts{};
}

}  // namespace tandem::gateway
