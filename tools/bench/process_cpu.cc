#include "tools/bench/process_cpu.h"

#include <unistd.h>

#include <fstream>
#include <iterator>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tandem::bench {

absl::StatusOr<double> ProcessCpuSeconds(int pid) {
  const std::string path = absl::StrCat("/proc/", pid, "/stat");
  std::ifstream in(path);
  const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses, so fields are counted
  // after its last ')'. utime and stime are fields 14 and 15, the 12th and 13th after it.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  const std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(stat).substr(close + 2), ' ', absl::SkipEmpty());
  int64_t utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return absl::InternalError(absl::StrCat("unexpected format of ", path));
  }
  static const double ticks_per_second = static_cast<double>(sysconf(_SC_CLK_TCK));
  return static_cast<double>(utime + stime) / ticks_per_second;
}

absl::StatusOr<std::vector<WatchedProcess>> ParseWatchedProcesses(absl::string_view text) {
  std::vector<WatchedProcess> out;
  std::set<std::string> labels;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    const std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(item, '=');
    WatchedProcess p;
    p.label = std::string(kv.first);
    if (p.label.empty() || !absl::SimpleAtoi(kv.second, &p.pid) || p.pid <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--cpu_pids: '", item, "' is not LABEL=PID (e.g. gateway=1234)"));
    }
    if (!labels.insert(p.label).second) {
      return absl::InvalidArgumentError(absl::StrCat("--cpu_pids: '", p.label, "' twice"));
    }
    if (!ProcessCpuSeconds(p.pid).ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--cpu_pids: no process ", p.pid, " (", p.label, ")"));
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace tandem::bench
