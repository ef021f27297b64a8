#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "workers/device.h"
#include "workers/engine.h"
#include "workers/remote_engine.h"
#include "workers/worker_config.h"

namespace tandem::workers {

struct LoadedEngine {
  // A model executor, or null when the worker fronts an engine server (`upstream`).
  std::unique_ptr<Engine> engine;
  // Where the weights came from, for tandem_worker_info's `weights` label: "checkpoint",
  // "random" (generated, or written by tandem-make-checkpoint), "none" (the simulator) or
  // "upstream" (the engine server's own).
  std::string weights;
  std::unique_ptr<RemoteEngine> upstream;
};

// The engine `config` asks for on `device`: the native engine on the CPU or, in a build with the
// CUDA engine, on a GPU; or the load simulator. Loading a checkpoint can take minutes. Random
// weights are never silent: they are logged as a warning here.
absl::StatusOr<LoadedEngine> MakeEngine(const WorkerConfig& config,
                                        const DeviceDescription& device);

}  // namespace tandem::workers
