// tandem-worker: one process per accelerator, serving one model.
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/process.h"
#include "spdlog/spdlog.h"
#include "workers/device.h"
#include "workers/engine_factory.h"
#include "workers/worker.h"
#include "workers/worker_flags.h"

ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error.");
ABSL_FLAG(absl::Duration, log_flush_interval, absl::Seconds(1),
          "How often log lines below warn are written out, in whole seconds (warn and above at "
          "once, and all at exit); 0 writes every line at once.");

namespace tandem::workers {
namespace {

int Run() {
  // Every configuration error is fatal here, with the flag named, before a device is opened or a
  // checkpoint read.
  absl::StatusOr<WorkerConfig> config = WorkerConfigFromFlags();
  if (!config.ok()) Fatal(std::string(config.status().message()));
  if (absl::Status s = config->Validate(); !s.ok()) Fatal(std::string(s.message()));
  for (const std::string& w : config->LimitWarnings()) spdlog::warn("{}", w);
  absl::StatusOr<DeviceDescription> device = config->engine == EngineKind::kUpstream
                                                 ? NameDevice(config->device)
                                                 : OpenDevice(config->device);
  if (!device.ok()) Fatal(std::string(device.status().message()));
  absl::StatusOr<LoadedEngine> engine = MakeEngine(*config, *device);
  if (!engine.ok()) Fatal(std::string(engine.status().message()));
  const absl::Duration load_time = config->synthetic_load_time;
  absl::StatusOr<std::unique_ptr<Worker>> worker =
      Worker::Start(*std::move(config), *std::move(device), *std::move(engine));
  if (!worker.ok()) Fatal(std::string(worker.status().message()));
  // Listening before the model is ready lets health checks and WorkerInfo report LOADING; the
  // simulator has no weights to load and can pretend to (--synthetic_load_time).
  AnnounceListening("tandem-worker", (*worker)->grpc_address(), (*worker)->metrics_address());
  std::this_thread::sleep_for(absl::ToChronoMilliseconds(load_time));
  (*worker)->Serve();

  const int sig = WaitForTerminationSignal();
  spdlog::info("signal {}", sig);
  (*worker)->Drain();
  (*worker)->Stop();
  return (*worker)->failed() ? 2 : 0;
}

}  // namespace
}  // namespace tandem::workers

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("tandem-worker --model=qwen|nemotron --device=N|cpu [flags]");
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil checks every Mutex acquisition for lock-order cycles (~2% of the gateway's
  // CPU in perf); lock-order bugs are for a ThreadSanitizer build to find.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  tandem::BlockTerminationSignals();
  tandem::InitLogging("tandem-worker", absl::GetFlag(FLAGS_log_level),
                      absl::GetFlag(FLAGS_log_flush_interval));
  return tandem::workers::Run();
}
