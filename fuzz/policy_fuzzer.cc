// libFuzzer target: the YAML config loaders, policies and tenants (operators' files; they must
// never crash on any input).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "policies/policy_loader.h"
#include "policies/tenant_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<tandem::policies::PolicyError> errors;
  auto p = tandem::policies::ParsePolicy(text, "fuzz.yaml", &errors);
  (void)p;
  auto t = tandem::policies::ParseTenantConfig(text, "fuzz.yaml", {"qwen", "nemotron"});
  (void)t;
  return 0;
}
