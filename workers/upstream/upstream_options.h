#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/tls.h"
#include "workers/upstream/engine_profile.h"

namespace tandem::workers::upstream {

struct UpstreamOptions {
  // http(s)://HOST:PORT of the engine server (no path).
  std::string url;
  EngineProfile profile;
  std::string api_key;
  TlsFiles tls;
  // When set, the engine server is the worker's child (EngineProcess): this command, run by
  // /bin/sh with CUDA_VISIBLE_DEVICES from `device`, restarted when it dies, stopped (SIGTERM,
  // then SIGKILL after stop_timeout) with the worker.
  std::string command;
  std::string device;
  absl::Duration stop_timeout = absl::Seconds(30);
  // The model id the engine must serve (its /v1/models); empty: whatever it serves, when that
  // is one model.
  std::string served_model;
  bool vision = false;
  // Requests in flight to the engine at once, and waiting here for a slot.
  int32_t max_in_flight = 64;
  int32_t max_queue = 256;
  absl::Duration connect_timeout = absl::Seconds(5);
  absl::Duration idle_timeout = absl::Seconds(60);
  size_t max_event_bytes = 4 << 20;
  // Readiness: the engine's health endpoint every interval, each probe given `timeout` (busy
  // engines answer slowly; a slow answer is not a dead engine); `failures` failed probes in a
  // row after ready make it dead, `successes` good ones make it ready again.
  absl::Duration health_interval = absl::Seconds(1);
  absl::Duration health_timeout = absl::Seconds(10);
  int32_t health_failures = 3;
  int32_t health_successes = 2;
  // Also ask the engine for one token (a chat completion, max_tokens 1) at most this often while
  // nothing is in flight: an engine whose health endpoint answers but that cannot generate is
  // then dead too. The first ready needs a good probe. Zero: no probe.
  absl::Duration probe_interval = absl::ZeroDuration();
  // The engine's /metrics: polled this often; data older than `metrics_stale` is not used.
  absl::Duration metrics_interval = absl::Milliseconds(250);
  absl::Duration metrics_timeout = absl::Seconds(2);
  absl::Duration metrics_stale = absl::Seconds(5);
  // The engine's own series served again on the worker's /metrics (EngineMetricsMirror); 0: none.
  int32_t engine_series = 5000;
};

// INVALID_ARGUMENT naming the flag at fault.
absl::Status ValidateUpstreamOptions(const UpstreamOptions& options);

}  // namespace tandem::workers::upstream
