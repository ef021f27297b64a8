#include "gateway/pool/endpoint.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "gateway/metrics/gateway_metrics.h"
#include "spdlog/spdlog.h"

namespace tandem::gateway {

const char* BreakerStateName(BreakerState s) {
  switch (s) {
    case BreakerState::kClosed:
      return "closed";
    case BreakerState::kOpen:
      return "open";
    case BreakerState::kHalfOpen:
      return "half_open";
  }
  return "?";
}

CallOutcome ClassifyCall(grpc::StatusCode code, bool caller_deadline_passed) {
  switch (code) {
    case grpc::StatusCode::OK:
      return CallOutcome::kSuccess;
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::UNKNOWN:
    case grpc::StatusCode::DATA_LOSS:
      return CallOutcome::kWorkerFault;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return caller_deadline_passed ? CallOutcome::kNeutral : CallOutcome::kWorkerFault;
    case grpc::StatusCode::INTERNAL:
      return CallOutcome::kInternal;
    default:
      // INVALID_ARGUMENT and its kin describe the request; RESOURCE_EXHAUSTED is a full queue
      // (load, not sickness); CANCELLED is the caller leaving.
      return CallOutcome::kNeutral;
  }
}

Endpoint::Endpoint(std::string model, std::unique_ptr<WorkerClient> client, EndpointOptions options,
                   GatewayMetrics* metrics)
    : model_(std::move(model)), client_(std::move(client)), options_(options), metrics_(metrics) {
  if (metrics_ != nullptr) metrics_->AddEndpoint(model_, address());
}

Endpoint::~Endpoint() {
  if (metrics_ != nullptr) metrics_->RemoveEndpoint(model_, address());
}

std::string Endpoint::metrics_url() const {
  absl::MutexLock l(&mu_);
  if (info_.metrics_port() <= 0) return "";
  const std::string& a = address();
  const size_t colon = a.rfind(':');
  return absl::StrCat(info_.metrics_tls() ? "https://" : "http://", a.substr(0, colon), ":",
                      info_.metrics_port(), "/metrics");
}

tandem::v1::WorkerInfo Endpoint::info() const {
  absl::MutexLock l(&mu_);
  return info_;
}

namespace {
constexpr uint64_t kFactsKnown = uint64_t{1} << 32;
constexpr uint64_t kFactsVision = uint64_t{1} << 33;
}  // namespace

ModelFacts Endpoint::facts() const {
  const uint64_t packed = facts_.load(std::memory_order_acquire);
  return ModelFacts{.known = (packed & kFactsKnown) != 0,
                    .vision = (packed & kFactsVision) != 0,
                    .max_output_tokens = static_cast<int32_t>(packed & 0xffffffffu)};
}

std::string Endpoint::not_ready_reason() const {
  absl::MutexLock l(&mu_);
  if (!not_ready_reason_.empty()) return not_ready_reason_;
  if (breaker() == BreakerState::kOpen) return absl::StrCat("ejected: ", last_fault_);
  return "";
}

tandem::v1::EndpointStatus Endpoint::Describe() const {
  tandem::v1::EndpointStatus s;
  s.set_model(model_);
  s.set_address(address());
  s.set_ready(ready());
  s.set_usable(usable());
  s.set_breaker(BreakerStateName(breaker()));
  s.set_reason(not_ready_reason());
  s.set_outstanding(outstanding());
  s.set_scraped_load(scraped_load());
  absl::MutexLock l(&mu_);
  s.set_consecutive_failures(std::max(consecutive_faults_, consecutive_internal_));
  s.set_ejections(ejections_);
  if (breaker() == BreakerState::kOpen) {
    s.set_ejected_for_seconds(std::max(
        0.0,
        std::chrono::duration<double>(ejected_until_ - std::chrono::steady_clock::now()).count()));
  }
  s.set_last_fault(last_fault_);
  return s;
}

void Endpoint::ExportState() {
  if (metrics_ != nullptr) {
    metrics_->SetEndpointState(model_, address(), ready(), static_cast<int>(breaker()));
  }
}

void Endpoint::Eject(TimePoint now, const char* why) {
  ejection_ = ejection_ == absl::ZeroDuration() ? options_.base_ejection
                                                : std::min(ejection_ * 2, options_.max_ejection);
  ejected_until_ = now + absl::ToChronoNanoseconds(ejection_);
  ++ejections_;
  breaker_.store(BreakerState::kOpen, std::memory_order_release);
  if (metrics_ != nullptr) metrics_->CountEjection(model_, address());
  spdlog::warn("worker {} for model {} ejected for {} ({}: {})", address(), model_,
               absl::FormatDuration(ejection_), why, last_fault_);
  ExportState();
}

void Endpoint::RecordCall(CallOutcome outcome, TimePoint now) {
  absl::MutexLock l(&mu_);
  switch (outcome) {
    case CallOutcome::kNeutral:
      return;
    case CallOutcome::kSuccess:
      consecutive_faults_ = 0;
      consecutive_internal_ = 0;
      consecutive_stalls_ = 0;
      return;
    case CallOutcome::kWorkerFault:
      ++consecutive_faults_;
      last_fault_ = "consecutive failed calls";
      break;
    case CallOutcome::kInternal:
      ++consecutive_internal_;
      last_fault_ = "consecutive INTERNAL errors";
      break;
    case CallOutcome::kStalled:
      ++consecutive_stalls_;
      last_fault_ = "consecutive stalled streams";
      break;
  }
  if (breaker() != BreakerState::kClosed) return;
  if (consecutive_faults_ >= options_.failure_threshold ||
      consecutive_internal_ >= options_.internal_error_threshold ||
      consecutive_stalls_ >= options_.stall_threshold) {
    if (consecutive_stalls_ >= options_.stall_threshold) {
      stall_ejected_.store(true, std::memory_order_release);
    }
    Eject(now, "passive outlier detection");
  }
}

void Endpoint::Tick(TimePoint now) {
  absl::MutexLock l(&mu_);
  if (breaker() == BreakerState::kOpen && now >= ejected_until_) {
    breaker_.store(BreakerState::kHalfOpen, std::memory_order_release);
    ExportState();
  }
}

void Endpoint::Probe(absl::Duration timeout, const std::function<void()>& on_change) {
  grpc::ClientContext* context = nullptr;
  {
    absl::MutexLock l(&mu_);
    if (probe_in_flight_) return;
    probe_in_flight_ = true;
    probe_context_ = std::make_unique<grpc::ClientContext>();
    probe_context_->set_deadline(std::chrono::system_clock::now() +
                                 absl::ToChronoMilliseconds(timeout));
    health_response_.Clear();
    context = probe_context_.get();  // replaced only by this probe's own callbacks
  }
  // The callback holds the endpoint: a pool may drop it (DNS change) while a probe runs.
  auto self = shared_from_this();
  client_->CheckHealth(context, &health_request_, &health_response_,
                       [self, timeout, on_change](grpc::Status status) {
                         self->HealthDone(status, timeout, on_change);
                       });
}

void Endpoint::HealthDone(const grpc::Status& status, absl::Duration timeout,
                          const std::function<void()>& on_change) {
  std::string failure;
  if (!status.ok()) {
    failure = absl::StrCat("health check: ", GrpcCodeName(status.error_code()), ": ",
                           status.error_message());
  } else if (health_response_.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    failure = absl::StrCat(
        "health check: ",
        grpc::health::v1::HealthCheckResponse::ServingStatus_Name(health_response_.status()));
  }
  if (!failure.empty()) {
    ProbeDone(status, failure, on_change);
    return;
  }
  grpc::ClientContext* context = nullptr;
  {
    absl::MutexLock l(&mu_);
    probe_context_ = std::make_unique<grpc::ClientContext>();
    probe_context_->set_deadline(std::chrono::system_clock::now() +
                                 absl::ToChronoMilliseconds(timeout));
    probe_response_.Clear();
    context = probe_context_.get();
  }
  auto self = shared_from_this();
  client_->GetInfo(context, &probe_request_, &probe_response_,
                   [self, on_change](grpc::Status s) { self->ProbeDone(s, "", on_change); });
}

void Endpoint::ProbeDone(const grpc::Status& status, const std::string& health_failure,
                         const std::function<void()>& on_change) {
  bool now_ready = false;
  std::string reason = health_failure;
  if (!reason.empty()) {
  } else if (!status.ok()) {
    reason = absl::StrCat(GrpcCodeName(status.error_code()), ": ", status.error_message());
  } else if (probe_response_.model_name() != model_) {
    reason = absl::StrCat("serves model '", probe_response_.model_name(), "', configured as '",
                          model_, "'");
  } else if (probe_response_.state() != tandem::v1::WorkerInfo::STATE_READY) {
    reason = absl::StrCat("state ", tandem::v1::WorkerInfo::State_Name(probe_response_.state()));
  } else {
    now_ready = true;
  }
  bool changed = false;
  bool readmitted = false;
  std::string engine, device;
  {
    absl::MutexLock l(&mu_);
    // A probe that only timed out says the worker (or this host) is slow, not that it is gone:
    // a ready endpoint stays ready until several in a row time out.
    const bool timed_out = !now_ready && status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    consecutive_probe_timeouts_ = timed_out ? consecutive_probe_timeouts_ + 1 : 0;
    if (timed_out && ready() && consecutive_probe_timeouts_ < probe_timeouts_allowed_.load()) {
      probe_in_flight_ = false;
      probe_cv_.SignalAll();
      return;
    }
    probes_timed_out_.store(timed_out, std::memory_order_release);
    const bool was_usable = usable();
    if (health_failure.empty() && status.ok()) {
      info_ = probe_response_;
      facts_.store((info_.model_id().empty() ? 0 : kFactsKnown) |
                       (info_.vision() ? kFactsVision : 0) |
                       static_cast<uint32_t>(info_.max_output_tokens()),
                   std::memory_order_release);
      engine = info_.engine();
      device = info_.device().id();
    }
    const bool reason_changed = not_ready_reason_ != reason;
    not_ready_reason_ = reason;
    ready_.store(now_ready, std::memory_order_release);
    // Half-open: this probe is the trial. A worker that is healthy again is readmitted at once;
    // a worker that still fails (or whose calls failed) is ejected again, for longer.
    if (breaker() == BreakerState::kHalfOpen) {
      if (now_ready) {
        breaker_.store(BreakerState::kClosed, std::memory_order_release);
        consecutive_faults_ = 0;
        consecutive_internal_ = 0;
        consecutive_stalls_ = 0;
        ejection_ = absl::ZeroDuration();
        stall_ejected_.store(false, std::memory_order_release);
        readmitted = true;
      } else {
        Eject(std::chrono::steady_clock::now(), "half-open probe failed");
      }
    }
    changed = was_usable != usable() || reason_changed || readmitted;
    ExportState();
  }
  if (changed) {
    if (usable()) {
      spdlog::info("worker {} for model {} is {} ({} on {})", address(), model_,
                   readmitted ? "readmitted" : "ready", engine, device);
    } else if (!now_ready) {
      spdlog::warn("worker {} for model {} is not ready: {}", address(), model_, reason);
    }
    on_change();
  }
  // Last: StopProbing returns once this is released.
  absl::MutexLock l(&mu_);
  probe_in_flight_ = false;
  probe_cv_.SignalAll();
}

bool Endpoint::probing() const {
  absl::MutexLock l(&mu_);
  return probe_in_flight_;
}

void Endpoint::StopProbing() {
  absl::MutexLock l(&mu_);
  if (probe_in_flight_ && probe_context_) probe_context_->TryCancel();
  while (probe_in_flight_) probe_cv_.Wait(&mu_);
}

}  // namespace tandem::gateway
