#include "workers/upstream/upstream_options.h"

#include "absl/strings/str_cat.h"

namespace tandem::workers::upstream {

absl::Status ValidateUpstreamOptions(const UpstreamOptions& options) {
  if (options.url.rfind("http://", 0) != 0 && options.url.rfind("https://", 0) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--upstream_url must be http(s)://HOST:PORT, got '", options.url, "'"));
  }
  if (options.max_in_flight < 1 || options.max_in_flight > 4096) {
    return absl::InvalidArgumentError("--upstream_max_in_flight must be in [1, 4096]");
  }
  if (options.max_queue < 0) return absl::InvalidArgumentError("--max_queue must be >= 0");
  if (options.engine_series < 0 || options.engine_series > 1000000) {
    return absl::InvalidArgumentError("--upstream_engine_series must be in [0, 1000000]");
  }
  if (options.metrics_interval < absl::Milliseconds(50)) {
    return absl::InvalidArgumentError("--upstream_metrics_interval must be at least 50ms");
  }
  if (options.health_interval <= absl::ZeroDuration() ||
      options.health_timeout <= absl::ZeroDuration() ||
      options.connect_timeout <= absl::ZeroDuration() || options.idle_timeout < absl::Seconds(1) ||
      options.metrics_stale <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--upstream_health_interval, _health_timeout, _connect_timeout and _metrics_stale must "
        "be > 0, --upstream_idle_timeout at least 1s");
  }
  if (options.probe_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--upstream_probe_interval must be >= 0 (0: no probe)");
  }
  if (options.stop_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--upstream_stop_timeout must be >= 0");
  }
  if (options.health_failures < 1 || options.health_successes < 1) {
    return absl::InvalidArgumentError(
        "--upstream_health_failures and --upstream_health_successes must be at least 1");
  }
  return absl::OkStatus();
}

}  // namespace tandem::workers::upstream
