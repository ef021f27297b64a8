#include "workers/worker_metrics.h"

#include "common/metric_families.h"

namespace tandem::workers {
namespace {

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
    : running(GaugeFamily(r, "tandem_worker_num_requests_running", "Requests in the running batch.")
                  .Add({{"model_name", l.model_name}})),
      waiting(GaugeFamily(r, "tandem_worker_num_requests_waiting",
                          "Requests admitted and waiting for a batch slot.")
                  .Add({{"model_name", l.model_name}})),
      ready(GaugeFamily(r, "tandem_worker_ready",
                        "1 when the model is loaded and the worker accepts requests, else 0.")
                .Add({{"model_name", l.model_name}})),
      prompt_tokens(
          CounterFamily(r, "tandem_worker_prompt_tokens_total", "Prompt tokens prefilled.")
              .Add({{"model_name", l.model_name}})),
      generation_tokens(
          CounterFamily(r, "tandem_worker_generation_tokens_total", "Tokens generated.")
              .Add({{"model_name", l.model_name}})),
      time_to_first_token(
          HistogramFamily(r, "tandem_worker_time_to_first_token_seconds",
                          "Time from arrival at the worker to the first generated token.")
              .Add({{"model_name", l.model_name}}, TtftBuckets())),
      time_per_output_token(
          HistogramFamily(r, "tandem_worker_time_per_output_token_seconds",
                          "Mean gap between generated tokens after the first, per request.")
              .Add({{"model_name", l.model_name}}, TpotBuckets())),
      queue_time(HistogramFamily(r, "tandem_worker_request_queue_time_seconds",
                                 "Time from arrival to joining the running batch.")
                     .Add({{"model_name", l.model_name}}, LatencyBuckets())),
      e2e_latency(HistogramFamily(r, "tandem_worker_e2e_request_latency_seconds",
                                  "Time from arrival to the last token.")
                      .Add({{"model_name", l.model_name}}, LatencyBuckets())),
      step_duration(HistogramFamily(r, "tandem_worker_step_duration_seconds",
                                    "Duration of one engine step (prefill and decode).")
                        .Add({{"model_name", l.model_name}}, TpotBuckets())),
      batch_size(HistogramFamily(r, "tandem_worker_batch_size",
                                 "Sequences in the batch, observed once per engine step.")
                     .Add({{"model_name", l.model_name}}, BatchBuckets())),
      finished_stop(
          CounterFamily(r, "tandem_worker_requests_total", "Requests finished, by finish_reason.")
              .Add({{"model_name", l.model_name}, {"finish_reason", "stop"}})),
      finished_length(CounterFamily(r, "tandem_worker_requests_total")
                          .Add({{"model_name", l.model_name}, {"finish_reason", "length"}})),
      finished_cancelled(CounterFamily(r, "tandem_worker_requests_total")
                             .Add({{"model_name", l.model_name}, {"finish_reason", "cancelled"}})),
      finished_deadline(
          CounterFamily(r, "tandem_worker_requests_total")
              .Add({{"model_name", l.model_name}, {"finish_reason", "deadline_exceeded"}})),
      finished_error(CounterFamily(r, "tandem_worker_requests_total")
                         .Add({{"model_name", l.model_name}, {"finish_reason", "error"}})),
      rejected_queue_full(CounterFamily(r, "tandem_worker_rejected_requests_total",
                                        "Requests refused before admission, by reason.")
                              .Add({{"model_name", l.model_name}, {"reason", "queue_full"}})),
      rejected_invalid(CounterFamily(r, "tandem_worker_rejected_requests_total")
                           .Add({{"model_name", l.model_name}, {"reason", "invalid_argument"}})),
      rejected_draining(CounterFamily(r, "tandem_worker_rejected_requests_total")
                            .Add({{"model_name", l.model_name}, {"reason", "draining"}})),
      rejected_loading(CounterFamily(r, "tandem_worker_rejected_requests_total")
                           .Add({{"model_name", l.model_name}, {"reason", "loading"}})),
      rejected_image_pool_full(
          CounterFamily(r, "tandem_worker_rejected_requests_total")
              .Add({{"model_name", l.model_name}, {"reason", "image_pool_full"}})),
      image_pool_threads(GaugeFamily(r, "tandem_worker_image_pool_threads",
                                     "Threads that decode and resize images (--image_threads).")
                             .Add({{"model_name", l.model_name}})),
      image_pool_queue_capacity(
          GaugeFamily(r, "tandem_worker_image_pool_queue_capacity",
                      "Requests with images that may wait for an image thread (--image_queue); "
                      "beyond them RESOURCE_EXHAUSTED.")
              .Add({{"model_name", l.model_name}})),
      image_pool_busy(GaugeFamily(r, "tandem_worker_image_pool_busy_threads",
                                  "Image threads working on a request's images.")
                          .Add({{"model_name", l.model_name}})),
      image_pool_queued(GaugeFamily(r, "tandem_worker_image_pool_queued_requests",
                                    "Requests with images waiting for an image thread.")
                            .Add({{"model_name", l.model_name}})),
      image_prepare_duration(
          HistogramFamily(r, "tandem_worker_image_prepare_duration_seconds",
                          "Time an image thread spends on one request's images (decode and "
                          "resize of all of them).")
              .Add({{"model_name", l.model_name}}, LatencyBuckets())),
      sequence_memory_reserved(GaugeFamily(r, "tandem_worker_sequence_memory_reserved_bytes",
                                           "KV cache and recurrent state bytes reserved by "
                                           "admitted sequences (prompt plus max_tokens each).")
                                   .Add({{"model_name", l.model_name}})),
      sequence_memory_budget(GaugeFamily(r, "tandem_worker_sequence_memory_budget_bytes",
                                         "Budget for sequence memory (--memory_budget); 0: none.")
                                 .Add({{"model_name", l.model_name}})),
      device_memory_total(GaugeFamily(r, "tandem_worker_device_memory_total_bytes",
                                      "Memory of the device this worker owns.")
                              .Add({{"model_name", l.model_name}, {"device", l.device}})),
      device_memory_used(GaugeFamily(r, "tandem_worker_device_memory_used_bytes",
                                     "Device memory in use (host memory in use for --device=cpu).")
                             .Add({{"model_name", l.model_name}, {"device", l.device}})),
      kv_cache_usage(GaugeFamily(r, "tandem_worker_kv_cache_usage_perc",
                                 "KV cache in use, 0 to 1: sequence memory reserved over its "
                                 "budget, or the fronted engine's own gauge (--engine=upstream).")
                         .Add({{"model_name", l.model_name}})),
      prefix_cache_hits(CounterFamily(r, "tandem_worker_prefix_cache_hits_total",
                                      "Prompts that resumed from a prefix-cache snapshot.")
                            .Add({{"model_name", l.model_name}})),
      prefix_cache_misses(CounterFamily(r, "tandem_worker_prefix_cache_misses_total",
                                        "Prompts looked up in the prefix cache without a match.")
                              .Add({{"model_name", l.model_name}})),
      prefix_cache_tokens_saved(
          CounterFamily(r, "tandem_worker_prefix_cache_tokens_saved_total",
                        "Prompt tokens resumed from the prefix cache instead of computed.")
              .Add({{"model_name", l.model_name}})),
      prefix_cache_inserts(CounterFamily(r, "tandem_worker_prefix_cache_inserts_total",
                                         "Snapshots taken into the prefix cache.")
                               .Add({{"model_name", l.model_name}})),
      prefix_cache_evictions(
          CounterFamily(r, "tandem_worker_prefix_cache_evictions_total",
                        "Snapshots evicted (least recently used first) for room.")
              .Add({{"model_name", l.model_name}})),
      prefix_cache_bytes(GaugeFamily(r, "tandem_worker_prefix_cache_bytes",
                                     "Bytes the prefix cache's snapshots hold (within "
                                     "--memory_budget, beside the sequences' reservations).")
                             .Add({{"model_name", l.model_name}})),
      prefix_cache_entries(GaugeFamily(r, "tandem_worker_prefix_cache_entries",
                                       "Snapshots in the prefix cache.")
                               .Add({{"model_name", l.model_name}})),
      engine_metrics_stale(GaugeFamily(r, "tandem_worker_engine_metrics_stale",
                                       "1 while the fronted engine's /metrics is older than "
                                       "--upstream_metrics_stale (its gauges are then not used).")
                               .Add({{"model_name", l.model_name}})),
      engine_metrics_age(GaugeFamily(r, "tandem_worker_engine_metrics_age_seconds",
                                     "Age of the fronted engine's last good /metrics read.")
                             .Add({{"model_name", l.model_name}})),
      info(GaugeFamily(r, "tandem_worker_info", "Constant 1; labels describe the worker.")
               .Add({{"model_name", l.model_name},
                     {"model_id", l.model_id},
                     {"engine", l.engine},
                     {"device", l.device},
                     {"device_name", l.device_name},
                     {"weights", l.weights},
                     {"quantization", l.quantization}})) {
  info.Set(1);
}

}  // namespace tandem::workers
