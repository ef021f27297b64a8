// libFuzzer target: safetensors headers and config.json through the model loaders.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "workers/cpu/cpu_model.h"
#include "workers/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = "/tmp/tandem-fuzz-safetensors-" + std::to_string(getpid());
  static const bool made = std::system(("mkdir -p " + dir).c_str()) == 0;
  if (!made) return 0;
  // The first byte picks the file the input becomes: the weights, or config.json next to the
  // golden-shaped weights.
  const bool config = size > 0 && (data[0] & 1);
  std::ofstream(dir + "/model.safetensors", std::ios::binary)
      .write(reinterpret_cast<const char*>(data + (size > 0)), size - (size > 0));
  std::ofstream(dir + "/config.json")
      << (config ? std::string(reinterpret_cast<const char*>(data + 1), size - 1)
                 : std::string(R"({"model_type": "nemotron_h"})"));
  auto c = tandem::workers::model::Checkpoint::Open(dir);
  if (c.ok()) (void)tandem::workers::cpu::LoadCpuModel(**c);
  return 0;
}
