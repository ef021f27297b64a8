#include "workers/worker_service.h"

#include <memory>
#include <utility>

#include "spdlog/spdlog.h"
#include "workers/generate_call.h"

namespace tandem::workers {

using tandem::v1::WorkerGenerateChunk;

WorkerService::WorkerService(const Engine* engine, Scheduler* scheduler, WorkerMetrics* metrics,
                             DeviceDescription device, RequestLimits limits,
                             ImagePool::Options image_pool)
    : engine_(engine),
      scheduler_(scheduler),
      info_(engine->Info()),
      metrics_(metrics),
      limits_(limits),
      rejected_log_(limits.rejected_log_per_second, 2 * limits.rejected_log_per_second),
      device_(std::move(device)),
      image_pool_(std::make_unique<ImagePool>(image_pool, metrics)) {
  RefreshDevice();
}

WorkerService::WorkerService(RemoteEngine* upstream, WorkerMetrics* metrics,
                             DeviceDescription device, RequestLimits limits)
    : engine_(nullptr),
      scheduler_(nullptr),
      upstream_(upstream),
      info_(upstream->Info()),
      metrics_(metrics),
      limits_(limits),
      rejected_log_(limits.rejected_log_per_second, 2 * limits.rejected_log_per_second),
      device_(std::move(device)),
      image_pool_(std::make_unique<ImagePool>(ImagePool::Options(), metrics)) {
  RefreshDevice();
}

grpc::ServerWriteReactor<WorkerGenerateChunk>* WorkerService::Generate(
    grpc::CallbackServerContext* context, const tandem::v1::WorkerGenerateRequest* request) {
  return new GenerateCall(info_, engine_, scheduler_, upstream_, metrics_, limits_, &rejected_log_,
                          image_pool_.get(), state_.load(), context, request);
}

grpc::ServerUnaryReactor* WorkerService::GetInfo(grpc::CallbackServerContext* context,
                                                 const tandem::v1::WorkerInfoRequest*,
                                                 tandem::v1::WorkerInfo* response) {
  const EngineInfo& info = info_;
  response->set_model_name(info.model_name);
  response->set_model_id(info.model_id);
  response->set_engine(info.engine);
  response->set_quantization(info.quantization);
  response->set_vision(info.vision);
  response->set_reasoning(info.reasoning);
  response->set_max_context_tokens(info.max_context_tokens);
  response->set_max_output_tokens(info.max_output_tokens);
  {
    absl::MutexLock l(&device_mu_);
    auto* d = response->mutable_device();
    d->set_id(device_.id);
    d->set_name(device_.name);
    d->set_memory_total_bytes(device_.memory_total_bytes);
    d->set_memory_free_bytes(device_.memory_free_bytes);
  }
  auto* load = response->mutable_load();
  if (upstream_ != nullptr) {
    load->set_running(upstream_->in_flight());
    load->set_waiting(upstream_->queued());
    load->set_max_batch_size(upstream_->max_in_flight());
    load->set_max_queue(upstream_->max_queue());
  } else {
    load->set_running(scheduler_->running());
    load->set_waiting(scheduler_->waiting());
    load->set_max_batch_size(scheduler_->options().max_batch_size);
    load->set_max_queue(scheduler_->options().max_queue);
  }
  response->set_state(state_.load());
  response->set_metrics_port(metrics_port_.load());
  response->set_metrics_tls(metrics_tls_.load());
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

void WorkerService::RefreshDevice() {
  // The device query runs outside the lock so GetInfo never waits on the driver.
  DeviceDescription d;
  {
    absl::MutexLock l(&device_mu_);
    d = device_;
  }
  if (absl::Status s = RefreshDeviceMemory(&d); !s.ok()) {
    spdlog::warn("cannot read device memory: {}", s.ToString());
    return;
  }
  metrics_->device_memory_total.Set(static_cast<double>(d.memory_total_bytes));
  metrics_->device_memory_used.Set(static_cast<double>(d.memory_total_bytes - d.memory_free_bytes));
  absl::MutexLock l(&device_mu_);
  device_ = std::move(d);
}

}  // namespace tandem::workers
