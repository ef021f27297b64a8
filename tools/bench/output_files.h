#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "tools/bench/run_result.h"

namespace tandem::bench {

// `text` into the file at `path` (created or truncated).
absl::Status WriteFile(const std::string& path, const std::string& text);

// The files a run writes besides the Markdown on stdout (--json, --svg); an empty path is not
// written.
struct OutputFiles {
  std::string json_path;
  std::string svg_path;

  // JSON: {"tool":"tandem-bench","preset":PRESET EXTRA,\n"runs":[RUNS]} where `extra_json` is
  // the preset's own members, each with its leading comma. SVG: the latency plot of `plotted`.
  absl::Status Write(absl::string_view preset, const std::string& extra_json,
                     const std::vector<RunResult>& runs, const std::vector<RunResult>& plotted,
                     const std::string& title) const;
};

}  // namespace tandem::bench
