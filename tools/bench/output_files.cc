#include "tools/bench/output_files.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/json_text.h"
#include "common/status_macros.h"
#include "tools/bench/json_report.h"
#include "tools/bench/svg_plot.h"

namespace tandem::bench {

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::Status OutputFiles::Write(absl::string_view preset, const std::string& extra_json,
                                const std::vector<RunResult>& runs,
                                const std::vector<RunResult>& plotted,
                                const std::string& title) const {
  if (!json_path.empty()) {
    RETURN_IF_ERROR(WriteFile(
        json_path, absl::StrCat("{\"tool\":\"tandem-bench\",\"preset\":", QuoteForJson(preset),
                                extra_json, ",\n\"runs\":", JsonRuns(runs), "}\n")));
  }
  if (!svg_path.empty()) RETURN_IF_ERROR(WriteFile(svg_path, LatencySvg(plotted, title)));
  return absl::OkStatus();
}

}  // namespace tandem::bench
