#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tandem {

// Start-up helpers shared by the two server binaries.

// Configures spdlog: one line per event on stderr, "[time] [process] [level] message".
// Lines at warn and above are written at once. Lower ones (the per-request lines) go through a
// 64 KiB buffer written every `flush_interval` (whole seconds; and when full, and at exit): one
// write(2) per line was several percent of the gateway's CPU per request. Zero, or stderr on a
// terminal, writes every line at once.
void InitLogging(const std::string& process_name, const std::string& level,
                 absl::Duration flush_interval);

// Blocks the calling thread until SIGINT or SIGTERM arrives and returns the signal number;
// SIGHUP runs `on_hangup` (when set) and keeps waiting. BlockTerminationSignals() must have been
// called before any thread started.
int WaitForTerminationSignal(const std::function<void()>& on_hangup = nullptr);

// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread (and the threads it creates later), so
// that only WaitForTerminationSignal() receives them.
void BlockTerminationSignals();

// Prints the machine-readable line tests and scripts wait for:
//   "<process> listening grpc=HOST:PORT metrics=HOST:PORT[ http=HOST:PORT]"
// on stdout, flushed; http= when `http_address` is not empty.
void AnnounceListening(const std::string& process, const std::string& grpc_address,
                       const std::string& metrics_address, const std::string& http_address = "");

// Logs `message` as critical and exits with status 2: for configuration and start-up errors.
[[noreturn]] void Fatal(const std::string& message);

// Splits "host:port"; the host may be "[v6]" or empty. Errors name the flag.
absl::StatusOr<std::pair<std::string, int>> ParseHostPort(const std::string& flag,
                                                          const std::string& value);

}  // namespace tandem
