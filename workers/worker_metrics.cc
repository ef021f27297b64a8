#include "workers/worker_metrics.h"

namespace tandem::workers {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

// OpenTelemetry GenAI semantic-convention buckets (seconds).
const Histogram::BucketBoundaries& TtftBuckets() {
  static const auto* b = new Histogram::BucketBoundaries{
      0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10};
  return *b;
}
const Histogram::BucketBoundaries& TpotBuckets() {
  static const auto* b =
      new Histogram::BucketBoundaries{0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1,
                                      0.15,  0.2,    0.3,   0.4,    0.5,  0.75,  1,    2.5};
  return *b;
}
const Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* b =
      new Histogram::BucketBoundaries{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                      0.5,    1,     2.5,    5,     10,   20,    40,   80,  160};
  return *b;
}
const Histogram::BucketBoundaries& BatchBuckets() {
  static const auto* b =
      new Histogram::BucketBoundaries{1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256};
  return *b;
}

}  // namespace

WorkerMetrics::WorkerMetrics(prometheus::Registry& r, const Labels& l)
    : running(BuildGauge()
                  .Name("tandem_worker_num_requests_running")
                  .Help("Requests in the running batch.")
                  .Register(r)
                  .Add({{"model_name", l.model_name}})),
      waiting(BuildGauge()
                  .Name("tandem_worker_num_requests_waiting")
                  .Help("Requests admitted and waiting for a batch slot.")
                  .Register(r)
                  .Add({{"model_name", l.model_name}})),
      ready(BuildGauge()
                .Name("tandem_worker_ready")
                .Help("1 when the model is loaded and the worker accepts requests, else 0.")
                .Register(r)
                .Add({{"model_name", l.model_name}})),
      prompt_tokens(BuildCounter()
                        .Name("tandem_worker_prompt_tokens_total")
                        .Help("Prompt tokens prefilled.")
                        .Register(r)
                        .Add({{"model_name", l.model_name}})),
      generation_tokens(BuildCounter()
                            .Name("tandem_worker_generation_tokens_total")
                            .Help("Tokens generated.")
                            .Register(r)
                            .Add({{"model_name", l.model_name}})),
      time_to_first_token(BuildHistogram()
                              .Name("tandem_worker_time_to_first_token_seconds")
                              .Help("Time from arrival at the worker to the first generated token.")
                              .Register(r)
                              .Add({{"model_name", l.model_name}}, TtftBuckets())),
      time_per_output_token(
          BuildHistogram()
              .Name("tandem_worker_time_per_output_token_seconds")
              .Help("Mean gap between generated tokens after the first, per request.")
              .Register(r)
              .Add({{"model_name", l.model_name}}, TpotBuckets())),
      queue_time(BuildHistogram()
                     .Name("tandem_worker_request_queue_time_seconds")
                     .Help("Time from arrival to joining the running batch.")
                     .Register(r)
                     .Add({{"model_name", l.model_name}}, LatencyBuckets())),
      e2e_latency(BuildHistogram()
                      .Name("tandem_worker_e2e_request_latency_seconds")
                      .Help("Time from arrival to the last token.")
                      .Register(r)
                      .Add({{"model_name", l.model_name}}, LatencyBuckets())),
      step_duration(BuildHistogram()
                        .Name("tandem_worker_step_duration_seconds")
                        .Help("Duration of one engine step (prefill and decode).")
                        .Register(r)
                        .Add({{"model_name", l.model_name}}, TpotBuckets())),
      batch_size(BuildHistogram()
                     .Name("tandem_worker_batch_size")
                     .Help("Sequences in the batch, observed once per engine step.")
                     .Register(r)
                     .Add({{"model_name", l.model_name}}, BatchBuckets())),
      finished_stop(BuildCounter()
                        .Name("tandem_worker_requests_total")
                        .Help("Requests finished, by finish_reason.")
                        .Register(r)
                        .Add({{"model_name", l.model_name}, {"finish_reason", "stop"}})),
      finished_length(BuildCounter()
                          .Name("tandem_worker_requests_total")
                          .Register(r)
                          .Add({{"model_name", l.model_name}, {"finish_reason", "length"}})),
      finished_cancelled(BuildCounter()
                             .Name("tandem_worker_requests_total")
                             .Register(r)
                             .Add({{"model_name", l.model_name}, {"finish_reason", "cancelled"}})),
      finished_deadline(
          BuildCounter()
              .Name("tandem_worker_requests_total")
              .Register(r)
              .Add({{"model_name", l.model_name}, {"finish_reason", "deadline_exceeded"}})),
      finished_error(BuildCounter()
                         .Name("tandem_worker_requests_total")
                         .Register(r)
                         .Add({{"model_name", l.model_name}, {"finish_reason", "error"}})),
      rejected_queue_full(BuildCounter()
                              .Name("tandem_worker_rejected_requests_total")
                              .Help("Requests refused before admission, by reason.")
                              .Register(r)
                              .Add({{"model_name", l.model_name}, {"reason", "queue_full"}})),
      rejected_invalid(BuildCounter()
                           .Name("tandem_worker_rejected_requests_total")
                           .Register(r)
                           .Add({{"model_name", l.model_name}, {"reason", "invalid_argument"}})),
      rejected_draining(BuildCounter()
                            .Name("tandem_worker_rejected_requests_total")
                            .Register(r)
                            .Add({{"model_name", l.model_name}, {"reason", "draining"}})),
      rejected_loading(BuildCounter()
                           .Name("tandem_worker_rejected_requests_total")
                           .Register(r)
                           .Add({{"model_name", l.model_name}, {"reason", "loading"}})),
      sequence_memory_reserved(
          BuildGauge()
              .Name("tandem_worker_sequence_memory_reserved_bytes")
              .Help("KV cache and recurrent state bytes reserved by admitted sequences (prompt "
                    "plus max_tokens each).")
              .Register(r)
              .Add({{"model_name", l.model_name}})),
      sequence_memory_budget(BuildGauge()
                                 .Name("tandem_worker_sequence_memory_budget_bytes")
                                 .Help("Budget for sequence memory (--memory_budget); 0: none.")
                                 .Register(r)
                                 .Add({{"model_name", l.model_name}})),
      device_memory_total(BuildGauge()
                              .Name("tandem_worker_device_memory_total_bytes")
                              .Help("Memory of the device this worker owns.")
                              .Register(r)
                              .Add({{"model_name", l.model_name}, {"device", l.device}})),
      device_memory_used(BuildGauge()
                             .Name("tandem_worker_device_memory_used_bytes")
                             .Help("Device memory in use (host memory in use for --device=cpu).")
                             .Register(r)
                             .Add({{"model_name", l.model_name}, {"device", l.device}})),
      info(BuildGauge()
               .Name("tandem_worker_info")
               .Help("Constant 1; labels describe the worker.")
               .Register(r)
               .Add({{"model_name", l.model_name},
                     {"model_id", l.model_id},
                     {"engine", l.engine},
                     {"device", l.device},
                     {"device_name", l.device_name},
                     {"weights", l.weights}})) {
  info.Set(1);
}

}  // namespace tandem::workers
