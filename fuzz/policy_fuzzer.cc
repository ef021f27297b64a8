// libFuzzer target: the policy YAML loader (operators' files; must never crash on any input).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "policies/policy_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<tandem::policies::PolicyError> errors;
  auto p = tandem::policies::ParsePolicy(std::string(reinterpret_cast<const char*>(data), size),
                                         "fuzz.yaml", &errors);
  (void)p;
  return 0;
}
