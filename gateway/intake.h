#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/request_validation.h"
#include "gateway/router_holder.h"
#include "gateway/worker_pool.h"
#include "router/router.h"
#include "tandem/v1/gateway.pb.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::gateway {

struct IntakeOptions {
  // Requests larger than this (serialized) are refused with INVALID_ARGUMENT.
  int64_t max_request_bytes = 8ll << 20;
  // max_tokens when the request sets none (capped at the model's limit).
  int32_t default_max_tokens = 1024;
  RequestLimits limits;
};

// Everything decided about a request before it is dispatched.
struct Admission {
  std::string request_id;
  router::RequestFeatures features;
  router::RouteDecision decision;
  ModelPool* pool = nullptr;
  // Null for dry runs.
  Endpoint* endpoint = nullptr;
  tandem::v1::WorkerGenerateRequest worker_request;
};

// Validation, routing and endpoint choice, shared by Generate, GenerateStream and Route.
// Thread-safe and non-blocking.
class Intake {
 public:
  Intake(const RouterHolder* router, const WorkerPools* pools, IntakeOptions options)
      : router_(router), pools_(pools), options_(options) {}

  // Fills `out`. `out->request_id` is set even on error (taken from the request, then from
  // `metadata_request_id`, else generated). With `dry_run` no endpoint is picked and no worker
  // request is built.
  // `deadline` is the call's (system_clock max for none); it becomes the deadline_ms feature.
  absl::Status Admit(const tandem::v1::GenerateRequest& request,
                     const std::string& metadata_request_id,
                     std::chrono::system_clock::time_point deadline, bool dry_run,
                     Admission* out) const;

  const IntakeOptions& options() const { return options_; }

 private:
  const RouterHolder* const router_;
  const WorkerPools* const pools_;
  const IntakeOptions options_;
};

// 16 random hex digits.
std::string NewRequestId();

}  // namespace tandem::gateway
