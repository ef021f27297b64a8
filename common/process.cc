#include "common/process.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "common/proto_request.h"
#include "spdlog/sinks/base_sink.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace tandem {

namespace {

// stderr through stdio's buffer. spdlog's console sinks fflush every line: a write(2) per
// request's log line, which was most of what the line cost.
// std::mutex: spdlog's base_sink takes a standard mutex type as its template parameter and
// locks it itself; no Tandem code touches it.
class BufferedStderrSink final : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    std::fwrite(formatted.data(), 1, formatted.size(), stderr);
  }
  void flush_() override { std::fflush(stderr); }
};

}  // namespace

void InitLogging(const std::string& process_name, const std::string& level,
                 absl::Duration flush_interval) {
  // spdlog 1.10 flushes every whole number of seconds.
  const bool valid = flush_interval == absl::ZeroDuration() || flush_interval >= absl::Seconds(1);
  // A terminal gets every line at once, in colour.
  const bool buffered = valid && flush_interval > absl::ZeroDuration() && !isatty(STDERR_FILENO);
  // Before anything is written to stderr: setvbuf must come first. gRPC's own log lines share
  // the buffer and the flushes.
  if (buffered) {
    static char buffer[64 << 10];
    std::setvbuf(stderr, buffer, _IOFBF, sizeof(buffer));
  }
  std::shared_ptr<spdlog::logger> logger =
      buffered
          ? std::make_shared<spdlog::logger>(process_name, std::make_shared<BufferedStderrSink>())
          : spdlog::stderr_color_mt(process_name);
  logger->set_pattern("[%Y-%m-%dT%H:%M:%S.%e] [%n] [%l] %v");
  logger->set_level(spdlog::level::from_str(level));
  spdlog::set_default_logger(logger);
  if (!valid) {
    Fatal(absl::StrFormat("--log_flush_interval=%s: 0 (every line at once) or at least 1s",
                          absl::FormatDuration(flush_interval)));
  }
  if (buffered) {
    spdlog::flush_on(spdlog::level::warn);
    spdlog::flush_every(absl::ToChronoSeconds(flush_interval));
  } else {
    spdlog::flush_on(spdlog::level::trace);
  }
  RouteProtobufLogsToSpdlog();
}

void Fatal(const std::string& message) {
  spdlog::critical("{}", message);
  spdlog::shutdown();
  std::exit(2);
}

namespace {
sigset_t HandledSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  return set;
}
}  // namespace

void BlockTerminationSignals() {
  const sigset_t set = HandledSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForTerminationSignal(const std::function<void()>& on_hangup) {
  const sigset_t set = HandledSignals();
  while (true) {
    int sig = 0;
    sigwait(&set, &sig);
    if (sig != SIGHUP) return sig;
    if (on_hangup) on_hangup();
  }
}

void AnnounceListening(const std::string& process, const std::string& grpc_address,
                       const std::string& metrics_address, const std::string& http_address) {
  // What start-up logged is on stderr before anyone who waited for this line reads it.
  spdlog::default_logger_raw()->flush();
  std::printf("%s listening grpc=%s metrics=%s%s%s\n", process.c_str(), grpc_address.c_str(),
              metrics_address.c_str(), http_address.empty() ? "" : " http=", http_address.c_str());
  std::fflush(stdout);
}

absl::StatusOr<std::pair<std::string, int>> ParseHostPort(const std::string& flag,
                                                          const std::string& value) {
  const size_t colon = value.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--%s=%s: expected HOST:PORT (port 0 picks a free one)", flag, value));
  }
  int port = 0;
  if (!absl::SimpleAtoi(value.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--%s=%s: port must be a number in [0, 65535]", flag, value));
  }
  std::string host = value.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return std::make_pair(host, port);
}

}  // namespace tandem
