#pragma once

#include <grpcpp/client_context.h>
#include <grpcpp/server_context.h>

#include <chrono>

namespace tandem {

// How long a worker may work on a call, sent by the gateway next to gRPC's propagated deadline:
// the caller's deadline less --worker_deadline_offset, as milliseconds from when it was sent.
// With it the worker stops the work and ends the call with DEADLINE_EXCEEDED before the caller's
// deadline passes upstream, so the end of stream (usage, finish reason) reaches the caller and
// the worker can tell a deadline from a client's cancel: gRPC's own copy of the deadline reaches
// the worker later than the caller's fires (the transit time is added to it), and the cancel
// that the caller's deadline sends would otherwise arrive first. Relative, not a wall-clock time,
// so that clock skew between hosts cannot shorten a request.
inline constexpr char kWorkerTimeoutHeader[] = "tandem-worker-timeout-ms";

// True when `deadline` means "none": gRPC reports no deadline as a time far in the future, not
// always exactly max(), so anything over a year away counts.
bool IsNoDeadline(std::chrono::system_clock::time_point deadline);

// Adds kWorkerTimeoutHeader for `worker_deadline` (0 when it already passed); nothing for an
// infinite deadline.
void AddWorkerTimeout(std::chrono::system_clock::time_point worker_deadline,
                      grpc::ClientContext* context);

// The earlier of the call's gRPC deadline and `received` plus its kWorkerTimeoutHeader (ignored
// when absent or not a number).
std::chrono::system_clock::time_point WorkerDeadline(
    const grpc::ServerContextBase& context, std::chrono::system_clock::time_point received);

}  // namespace tandem
