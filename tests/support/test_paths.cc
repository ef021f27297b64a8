#include "tests/support/test_paths.h"

// Defined in the generated test_paths_values.cc (tests/CMakeLists.txt).
extern const char kTandemSourceDir[];
extern const char kTandemWorkerBin[];
extern const char kTandemGatewayBin[];
extern const char kTandemCtlBin[];
extern const char kTandemMakeCheckpointBin[];
extern const char kTandemNativeCheckpointDir[];
extern const char kTandemPromtoolBin[];
extern const char kTandemPrometheusBin[];

namespace tandem::testing {

const char* SourceDir() { return kTandemSourceDir; }

std::string SourcePath(std::string_view relative) {
  std::string path(kTandemSourceDir);
  path.append(relative);
  return path;
}

const char* WorkerBin() { return kTandemWorkerBin; }
const char* GatewayBin() { return kTandemGatewayBin; }
const char* CtlBin() { return kTandemCtlBin; }
const char* MakeCheckpointBin() { return kTandemMakeCheckpointBin; }
std::string NativeCheckpoint(std::string_view arch) {
  return std::string(kTandemNativeCheckpointDir) + "/" + std::string(arch);
}
const char* PromtoolBin() { return kTandemPromtoolBin; }
const char* PrometheusBin() { return kTandemPrometheusBin; }

}  // namespace tandem::testing
