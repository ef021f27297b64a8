// libFuzzer target: the Prometheus text parser (worker /metrics scrapes are untrusted input).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/prometheus_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto samples = tandem::ParsePrometheusText(
      std::string_view(reinterpret_cast<const char*>(data), size));
  if (samples.ok()) {
    for (const auto& s : *samples) (void)tandem::LabelsMatch(s.labels, s.labels);
  }
  return 0;
}
