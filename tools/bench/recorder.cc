#include "tools/bench/recorder.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"

namespace tandem::bench {

void Recorder::Add(const grpc::Status& status, double e2e_ms, double ttft_ms, int tokens,
                   const std::vector<double>& gaps) {
  absl::MutexLock lock(&mu_);
  codes_[GrpcCodeName(status.error_code())]++;
  if (!status.ok()) {
    if (errors_.size() < 5) {
      std::string m = absl::StrCat(GrpcCodeName(status.error_code()), ": ", status.error_message());
      if (std::find(errors_.begin(), errors_.end(), m) == errors_.end()) errors_.push_back(m);
    }
    return;
  }
  ++ok_;
  tokens_ += tokens;
  e2e_.push_back(e2e_ms);
  if (ttft_ms >= 0) {
    ttft_.push_back(ttft_ms);
    if (tokens > 1) tpot_.push_back((e2e_ms - ttft_ms) / (tokens - 1));
  }
  gaps_.insert(gaps_.end(), gaps.begin(), gaps.end());
}

void Recorder::AddDropped() {
  absl::MutexLock lock(&mu_);
  codes_["CLIENT_OVERLOAD"]++;
}

void Recorder::Fill(RunResult* r) {
  absl::MutexLock lock(&mu_);
  r->ok = ok_;
  r->completion_tokens = tokens_;
  r->codes = codes_;
  r->errors = errors_;
  r->e2e_ms = Summarize(e2e_);
  r->ttft_ms = Summarize(ttft_);
  r->tpot_ms = Summarize(tpot_);
  r->gap_ms = Summarize(gaps_);
  auto samples = std::make_shared<RunResult::Samples>();
  samples->e2e = std::move(e2e_);
  samples->ttft = std::move(ttft_);
  samples->tpot = std::move(tpot_);
  samples->gaps = std::move(gaps_);
  r->samples = std::move(samples);
}

}  // namespace tandem::bench
