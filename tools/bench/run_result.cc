#include "tools/bench/run_result.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace tandem::bench {

Percentiles Summarize(std::vector<double> v) {
  Percentiles p;
  p.count = static_cast<int64_t>(v.size());
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  p.mean = sum / v.size();
  // Nearest rank.
  auto at = [&](double q) {
    size_t rank = static_cast<size_t>(std::ceil(q * v.size()));
    return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
  };
  p.p50 = at(0.50);
  p.p90 = at(0.90);
  p.p99 = at(0.99);
  p.p999 = at(0.999);
  p.max = v.back();
  return p;
}

double RunResult::Window() const {
  if (spec.rate > 0 && spec.requests == 0) {
    return std::max(wall_seconds, absl::ToDoubleSeconds(spec.duration));
  }
  return wall_seconds;
}

RunResult Merge(const std::vector<RunResult>& parts) {
  RunResult m;
  m.spec = parts.front().spec;
  m.spec.duration = absl::ZeroDuration();
  m.spec.requests = 0;
  auto samples = std::make_shared<RunResult::Samples>();
  auto append = [](std::vector<double>* to, const std::vector<double>& from) {
    to->insert(to->end(), from.begin(), from.end());
  };
  for (const RunResult& p : parts) {
    m.spec.duration += p.spec.duration;
    m.spec.requests += p.spec.requests;
    m.wall_seconds += p.Window();
    m.issued += p.issued;
    m.ok += p.ok;
    m.completion_tokens += p.completion_tokens;
    for (const auto& [code, n] : p.codes) m.codes[code] += n;
    for (const auto& [label, seconds] : p.cpu_seconds) m.cpu_seconds[label] += seconds;
    for (const auto& e : p.errors) {
      if (m.errors.size() < 5 && std::find(m.errors.begin(), m.errors.end(), e) == m.errors.end()) {
        m.errors.push_back(e);
      }
    }
    if (p.samples == nullptr) continue;
    append(&samples->e2e, p.samples->e2e);
    append(&samples->ttft, p.samples->ttft);
    append(&samples->tpot, p.samples->tpot);
    append(&samples->gaps, p.samples->gaps);
  }
  m.e2e_ms = Summarize(samples->e2e);
  m.ttft_ms = Summarize(samples->ttft);
  m.tpot_ms = Summarize(samples->tpot);
  m.gap_ms = Summarize(samples->gaps);
  m.samples = std::move(samples);
  return m;
}

double RunResult::CpuMicrosPerRequest(const std::string& label) const {
  auto it = cpu_seconds.find(label);
  if (it == cpu_seconds.end() || ok <= 0) return -1;
  return it->second * 1e6 / static_cast<double>(ok);
}

bool Clean(const RunResult& r) {
  return r.ok > 0 && r.codes.size() == 1 && r.codes.count("OK") == 1;
}

}  // namespace tandem::bench
