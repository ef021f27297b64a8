#pragma once

#include <string>

#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace tandem::workers {

// Every metric the worker exports, defined here and nowhere else. Names follow vLLM's where one
// exists, with the tandem_worker_ prefix; units are seconds, bytes and tokens. Every series
// carries model_name; children are created up front so series exist at 0 from the start.
struct WorkerMetrics {
  struct Labels {
    std::string model_name;
    std::string model_id;
    std::string engine;
    std::string device;
    std::string device_name;
    // Where the weights come from: "checkpoint", "random" (generated or written by
    // tandem-make-checkpoint: a measuring tool, meaningless answers) or "none" (synthetic).
    std::string weights = "none";
    // The weights' format (EngineInfo::quantization).
    std::string quantization = "none";
  };
  WorkerMetrics(prometheus::Registry& registry, const Labels& labels);

  prometheus::Gauge& running;
  prometheus::Gauge& waiting;
  prometheus::Gauge& ready;
  prometheus::Counter& prompt_tokens;
  prometheus::Counter& generation_tokens;
  prometheus::Histogram& time_to_first_token;
  prometheus::Histogram& time_per_output_token;
  prometheus::Histogram& queue_time;
  prometheus::Histogram& e2e_latency;
  prometheus::Histogram& step_duration;
  prometheus::Histogram& batch_size;
  // Finished requests by finish_reason.
  prometheus::Counter& finished_stop;
  prometheus::Counter& finished_length;
  prometheus::Counter& finished_cancelled;
  prometheus::Counter& finished_deadline;
  prometheus::Counter& finished_error;
  // Requests refused at admission, by reason.
  prometheus::Counter& rejected_queue_full;
  prometheus::Counter& rejected_invalid;
  prometheus::Counter& rejected_draining;
  prometheus::Counter& rejected_loading;
  // Requests with images refused because the image pool was full (reason="image_pool_full").
  prometheus::Counter& rejected_image_pool_full;
  // The image pool (workers/image_pool.h): its size (--image_threads, --image_queue), the
  // threads working and the jobs waiting for one, and the time a request's images take there
  // (decode and resize of all of them).
  prometheus::Gauge& image_pool_threads;
  prometheus::Gauge& image_pool_queue_capacity;
  prometheus::Gauge& image_pool_busy;
  prometheus::Gauge& image_pool_queued;
  prometheus::Histogram& image_prepare_duration;
  // KV cache and recurrent state reserved by running sequences, and its budget (0: none).
  prometheus::Gauge& sequence_memory_reserved;
  prometheus::Gauge& sequence_memory_budget;
  prometheus::Gauge& device_memory_total;
  prometheus::Gauge& device_memory_used;
  // KV cache in use, 0..1 (the engine's own gauge for an upstream engine).
  prometheus::Gauge& kv_cache_usage;
  // The native engine's prefix cache: lookups that resumed from a snapshot or not, prompt
  // tokens resumed instead of computed, snapshots taken and evicted (to make room for others or
  // for sequences), and what it holds now.
  prometheus::Counter& prefix_cache_hits;
  prometheus::Counter& prefix_cache_misses;
  prometheus::Counter& prefix_cache_tokens_saved;
  prometheus::Counter& prefix_cache_inserts;
  prometheus::Counter& prefix_cache_evictions;
  prometheus::Gauge& prefix_cache_bytes;
  prometheus::Gauge& prefix_cache_entries;
  // An upstream engine's /metrics: stale (1) past --upstream_metrics_stale, and its age.
  prometheus::Gauge& engine_metrics_stale;
  prometheus::Gauge& engine_metrics_age;
  prometheus::Gauge& info;
};

}  // namespace tandem::workers
