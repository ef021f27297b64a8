#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/http_server.h"
#include "common/metrics_server.h"
#include "common/tls.h"
#include "gateway/dispatch/dispatcher.h"
#include "gateway/dispatch/fair_queue.h"
#include "gateway/intake/intake.h"
#include "gateway/intake/tenants.h"
#include "gateway/pool/worker_pools.h"
#include "gateway/signals/signal_engine.h"
#include "policies/policy_loader.h"
#include "router/builtin_router.h"

namespace tandem::gateway {

// Everything tandem-gateway runs with: read from its flags (gateway_flags.h) or built by a test,
// and checked by Validate() before anything starts. A default-constructed config with
// server_credentials set and plaintext workers is valid.
// Fields that tie components together (the dispatcher's decision log, tenants and queues, the
// pools' credentials, the router's model set) are filled in by Gateway, not here.
struct GatewayConfig {
  // The gRPC port and its transport (null credentials: refused by Validate).
  std::string listen = "127.0.0.1:0";
  std::shared_ptr<grpc::ServerCredentials> server_credentials;
  std::string server_transport = "tls";  // "tls", "mtls" or "plaintext", for the start-up line
  // Bytes gRPC may hold for client connections and calls (0: unbounded).
  int64_t grpc_memory_limit = 2ll << 30;
  // gRPC's own receive limit is intake.max_request_bytes plus this: a request up to that size is
  // read and refused by the intake with INVALID_ARGUMENT naming --max_request_bytes; only one
  // beyond it meets gRPC's RESOURCE_EXHAUSTED, before its bytes are held.
  int64_t grpc_receive_headroom_bytes = 32ll << 20;
  // Clients' connections get GOAWAY after this age (0: never).
  absl::Duration max_connection_age = absl::Minutes(10);

  // The OpenAI-compatible HTTP front (empty: off), on the gRPC port's TLS files unless that is
  // plaintext. Its body limit is intake.max_request_bytes.
  std::string http_listen;
  HttpServerOptions http;
  // Web origins whose pages may call the HTTP front (CORS); empty: none.
  std::vector<std::string> http_cors_origins;

  // The /metrics port.
  std::string metrics_listen = "127.0.0.1:0";
  MetricsServerOptions metrics_server;
  std::string metrics_transport = "http";

  // Workers: "MODEL=HOST:PORT" entries (the policy's models.NAME.endpoints are added at start),
  // how they are called, probed, ejected and scraped.
  std::vector<std::string> workers;
  TlsFiles worker_tls;
  std::string worker_tls_server_name;
  bool worker_plaintext = false;
  WorkerPoolsOptions pools;
  SignalEngineOptions signals;
  // Requests dispatched to a worker beyond its batch (-1: the worker's max_queue).
  int dispatch_headroom = 2;
  // Each model's dispatch slots; max_inflight 0: no gateway-side queue.
  FairQueue::Options queue{.max_inflight = 1024, .max_queued_per_tenant = 256};

  // Routing: the policy file when set, else the built-in rules.
  std::string policy_path;
  policies::PolicyLimits policy_limits;
  router::BuiltinRouterConfig builtin_router;
  // How often the policy and tenants files are checked for changes.
  absl::Duration policy_watch_interval = absl::Seconds(1);

  // Requests.
  IntakeOptions intake;
  DispatchOptions dispatch;

  // Tenants: the file (empty: everyone is anonymous, which needs allow_unauthenticated).
  std::string tenants_path;
  TenantRegistryOptions tenants;

  // A tokenizer.json for exact prompt counts near thresholds (empty: estimates only), and how
  // near (an estimate within band x T of a threshold T).
  std::string tokenizer_path;
  double exact_token_band = 0.5;

  // Sessions: the table's bounds and the route tokens' key (empty: a random key of this process,
  // so only this replica honours its tokens). Read from --session_key_file.
  SessionOptions sessions;
  std::string session_key;

  // Decision log (empty path: none); records the writer may fall behind before dropping.
  std::string decision_log_path;
  int64_t decision_log_queue = 10000;

  // On SIGTERM: how long requests in flight may take, then how long without new calls before
  // the server stops.
  absl::Duration drain_timeout = absl::Seconds(30);
  absl::Duration drain_quiet_period = absl::Milliseconds(200);

  // Every check of the configuration, in one place: InvalidArgument naming the flag at fault.
  absl::Status Validate() const;
  // Limits that another limit makes unreachable (an image larger than any request may be), one
  // line each naming both flags; logged at start-up.
  std::vector<std::string> LimitWarnings() const;
  // gRPC's receive limit for one message: max_request_bytes + grpc_receive_headroom_bytes.
  int GrpcReceiveLimit() const;
};

}  // namespace tandem::gateway
