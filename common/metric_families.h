#pragma once

#include <string>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace tandem {

// One call per metric family: its name and help, so that a process's metric definitions read
// as a table. Registering a name again returns the existing family (a second label set of one
// metric passes no help).
inline prometheus::Family<prometheus::Counter>& CounterFamily(prometheus::Registry& r,
                                                              const std::string& name,
                                                              const std::string& help = "") {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r);
}

inline prometheus::Family<prometheus::Gauge>& GaugeFamily(prometheus::Registry& r,
                                                          const std::string& name,
                                                          const std::string& help = "") {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r);
}

inline prometheus::Family<prometheus::Histogram>& HistogramFamily(prometheus::Registry& r,
                                                                  const std::string& name,
                                                                  const std::string& help = "") {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(r);
}

}  // namespace tandem
