#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace tandem::gateway {

// The caller's side of a generation, whichever front it came in by: what GenerationCall needs
// from the caller's call (gRPC's server context, or an HTTP request). The front owns the
// protocol; the request path behind it is one.
class CallerContext {
 public:
  virtual ~CallerContext() = default;

  // The `api` label of request metrics: "grpc" or "openai".
  virtual const char* api() const = 0;
  // The API key the caller presented (empty when none); the tenant comes from this only.
  virtual std::string ApiKey() const = 0;
  // The request id the caller set outside the request body (x-request-id); empty when none.
  virtual std::string RequestIdHeader() const = 0;
  // The session id and route token the caller sent outside the request body (x-session-id and
  // x-tandem-session-token); empty when none. The request's own fields win.
  virtual std::string SessionIdHeader() const = 0;
  virtual std::string SessionTokenHeader() const = 0;
  // The caller's deadline; system_clock's max when it set none.
  virtual std::chrono::system_clock::time_point deadline() const = 0;
  // The caller went away (or its deadline passed and the front noticed).
  virtual bool IsCancelled() const = 0;
  // A refusal may be retried after `ms` milliseconds: said where the protocol says it (gRPC's
  // retry-after-ms trailer, HTTP's Retry-After header).
  virtual void SetRetryAfterMs(int64_t ms) = 0;
  // The context of a call to a worker: the gRPC front's propagates the caller's deadline and
  // cancellation; the others rely on the deadline GenerationCall sets and on its CancelAll.
  virtual std::unique_ptr<grpc::ClientContext> NewWorkerContext() const = 0;
};

}  // namespace tandem::gateway
