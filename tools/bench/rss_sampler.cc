#include "tools/bench/rss_sampler.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace tandem::bench {

absl::StatusOr<int64_t> RssKb(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      int64_t kb = 0;
      std::istringstream(line.substr(6)) >> kb;
      return kb;
    }
  }
  return absl::NotFoundError(absl::StrCat("no VmRSS in /proc/", pid, "/status"));
}

RssSampler::RssSampler(int pid) : pid_(pid) {
  if (pid_ > 0) thread_ = std::thread([this] { Loop(); });
}

void RssSampler::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void RssSampler::Loop() {
  while (!stop_) {
    if (auto kb = RssKb(pid_); kb.ok()) max_kb_ = std::max<int64_t>(max_kb_, *kb);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace tandem::bench
