// tandem-gateway: the gRPC front that routes every LLM request to a model's workers.
#include <cstdio>
#include <string>
#include <thread>

#ifdef TANDEM_TCMALLOC
#include <gperftools/malloc_extension.h>
#endif

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/process.h"
#include "gateway/flags.h"
#include "gateway/gateway.h"
#include "policies/limit_flags.h"
#include "policies/policy_loader.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, validate_policy, "",
          "Check this policy file, print every error, and exit (0 valid, 1 invalid).");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error.");
ABSL_FLAG(absl::Duration, log_flush_interval, absl::Seconds(1),
          "How often log lines below warn are written out, in whole seconds (warn and above at "
          "once, and all at exit); 0 writes every line at once.");

namespace tandem::gateway {
namespace {

int ValidatePolicy(const std::string& path) {
  auto limits = policies::PolicyLimitsFromFlags();
  if (!limits.ok()) Fatal(std::string(limits.status().message()));
  std::vector<policies::PolicyError> errors;
  auto policy = policies::LoadPolicyFile(path, &errors, *limits);
  if (!policy.ok()) {
    std::fprintf(stderr, "%s\n", std::string(policy.status().message()).c_str());
    return 1;
  }
  std::printf("%s: valid (version %s, sha256 %s, %zu rules)\n", path.c_str(),
              (*policy)->version.c_str(), (*policy)->sha256.c_str(), (*policy)->rules.size());
  return 0;
}

#ifdef TANDEM_TCMALLOC
// tcmalloc hands freed pages back to the system only while frees keep coming, so after a burst
// the gateway would hold its peak until the next one. Once a second, what is free goes back
// (the RSS after an overload then returns to near idle, docs/performance.md).
class FreeMemoryReturner {
 public:
  FreeMemoryReturner()
      : thread_([this] {
          while (!stop_.WaitForNotificationWithTimeout(absl::Seconds(1))) {
            MallocExtension::instance()->ReleaseFreeMemory();
          }
        }) {}
  ~FreeMemoryReturner() {
    stop_.Notify();
    thread_.join();
  }

 private:
  absl::Notification stop_;
  std::thread thread_;
};
#else
// The sanitizers' allocators manage their own.
struct FreeMemoryReturner {
  FreeMemoryReturner() {}  // user-provided: no unused-variable warning where it is held
};
#endif

int Run() {
  if (const std::string v = absl::GetFlag(FLAGS_validate_policy); !v.empty()) {
    return ValidatePolicy(v);
  }
  // Every configuration error is fatal here, before anything starts, with the flag named.
  absl::StatusOr<GatewayConfig> config = GatewayConfigFromFlags();
  if (!config.ok()) Fatal(std::string(config.status().message()));
  if (absl::Status s = config->Validate(); !s.ok()) Fatal(std::string(s.message()));
  for (const std::string& w : config->LimitWarnings()) spdlog::warn("{}", w);
  absl::StatusOr<std::unique_ptr<Gateway>> gateway = Gateway::Start(*std::move(config));
  if (!gateway.ok()) Fatal(std::string(gateway.status().message()));
  AnnounceListening("tandem-gateway", (*gateway)->grpc_address(), (*gateway)->metrics_address(),
                    (*gateway)->http_address());
  const FreeMemoryReturner free_memory;

  const int sig = WaitForTerminationSignal([&] { (*gateway)->Reload("SIGHUP"); });
  spdlog::info("signal {}", sig);
  (*gateway)->Drain();
  (*gateway)->Stop();
  return 0;
}

}  // namespace
}  // namespace tandem::gateway

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("tandem-gateway --workers=qwen=HOST:PORT,nemotron=HOST:PORT");
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil checks every Mutex acquisition for lock-order cycles (~2% of the gateway's
  // CPU in perf); lock-order bugs are for a ThreadSanitizer build to find.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  tandem::BlockTerminationSignals();
  tandem::InitLogging("tandem-gateway", absl::GetFlag(FLAGS_log_level),
                      absl::GetFlag(FLAGS_log_flush_interval));
  return tandem::gateway::Run();
}
