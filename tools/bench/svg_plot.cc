#include "tools/bench/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_format.h"
#include "tools/bench/markdown.h"

namespace tandem::bench {
namespace {

// The canvas and the margins around the plot area, in pixels.
constexpr int kWidth = 800, kHeight = 500, kLeft = 70, kRight = 200, kTop = 40, kBottom = 50;

class LatencyPlot {
 public:
  explicit LatencyPlot(const std::vector<RunResult>& results);

  bool empty() const { return series_.empty(); }
  // The axes, the y grid with its labels and the loads under the x axis.
  std::string Axes() const;
  // One polyline per series and percentile, with its legend entry.
  std::string Lines() const;

 private:
  // Pixel coordinates of a load and of a latency in ms.
  double X(double load) const;
  double Y(double ms) const;

  std::map<std::string, std::vector<const RunResult*>> series_;  // by label
  std::vector<std::string> order_;                               // labels, first seen first
  double xmin_ = 1e300, xmax_ = 0, ymin_ = 1e300, ymax_ = 0;
  bool logx_ = false;
};

LatencyPlot::LatencyPlot(const std::vector<RunResult>& results) {
  for (const auto& r : results) {
    if (r.ok == 0) continue;
    if (!series_.count(r.spec.label)) order_.push_back(r.spec.label);
    series_[r.spec.label].push_back(&r);
  }
  for (const auto& [_, rs] : series_) {
    for (const RunResult* r : rs) {
      xmin_ = std::min(xmin_, r->Load());
      xmax_ = std::max(xmax_, r->Load());
      ymin_ = std::min(ymin_, std::max(1e-3, r->e2e_ms.p50));
      ymax_ = std::max(ymax_, r->e2e_ms.p999);
    }
  }
  if (empty()) return;
  if (xmax_ <= xmin_) xmax_ = xmin_ * 2 + 1;
  // Whole decades on the y axis, at least one.
  ymin_ = std::pow(10, std::floor(std::log10(ymin_)));
  ymax_ = std::pow(10, std::ceil(std::log10(std::max(ymax_, ymin_ * 10))));
  logx_ = xmax_ / std::max(xmin_, 1e-9) >= 10 && xmin_ > 0;
}

double LatencyPlot::X(double load) const {
  const double f =
      logx_ ? (std::log10(load) - std::log10(xmin_)) / (std::log10(xmax_) - std::log10(xmin_))
            : (load - xmin_) / (xmax_ - xmin_);
  return kLeft + f * (kWidth - kLeft - kRight);
}

double LatencyPlot::Y(double ms) const {
  const double f = (std::log10(std::max(ms, ymin_)) - std::log10(ymin_)) /
                   (std::log10(ymax_) - std::log10(ymin_));
  return kHeight - kBottom - f * (kHeight - kTop - kBottom);
}

std::string LatencyPlot::Axes() const {
  std::string svg = absl::StrFormat(
      "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n"
      "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n",
      kLeft, kHeight - kBottom, kWidth - kRight, kHeight - kBottom, kLeft, kTop, kLeft,
      kHeight - kBottom);
  for (double y = ymin_; y <= ymax_ * 1.0001; y *= 10) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                          "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s ms</text>\n",
                          kLeft, Y(y), kWidth - kRight, Y(y), kLeft - 5, Y(y) + 4, Fmt(y));
  }
  std::vector<double> xs;
  for (const auto& [_, rs] : series_) {
    for (const RunResult* r : rs) xs.push_back(r->Load());
  }
  std::sort(xs.begin(), xs.end());
  xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
  for (double x : xs) {
    absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
                          X(x), kHeight - kBottom + 16, Fmt(x));
  }
  return svg;
}

std::string LatencyPlot::Lines() const {
  const char* colours[] = {"#1f77b4", "#2ca02c", "#ff7f0e", "#d62728"};
  const char* names[] = {"p50", "p90", "p99", "p99.9"};
  const char* dashes[] = {"", "6,4", "2,3", "10,3,2,3"};
  std::string svg;
  int legend_y = kTop;
  for (size_t si = 0; si < order_.size(); ++si) {
    auto rs = series_.at(order_[si]);
    std::sort(rs.begin(), rs.end(),
              [](const RunResult* a, const RunResult* b) { return a->Load() < b->Load(); });
    for (int pi = 0; pi < 4; ++pi) {
      std::string points;
      for (const RunResult* r : rs) {
        const double v[] = {r->e2e_ms.p50, r->e2e_ms.p90, r->e2e_ms.p99, r->e2e_ms.p999};
        absl::StrAppendFormat(&points, "%.1f,%.1f ", X(r->Load()), Y(v[pi]));
      }
      absl::StrAppendFormat(&svg,
                            "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" "
                            "stroke-dasharray=\"%s\" points=\"%s\"/>\n",
                            colours[pi], dashes[si % 4], points);
      absl::StrAppendFormat(&svg,
                            "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" "
                            "stroke-width=\"2\" stroke-dasharray=\"%s\"/><text x=\"%d\" "
                            "y=\"%d\">%s %s</text>\n",
                            kWidth - kRight + 10, legend_y, kWidth - kRight + 40, legend_y,
                            colours[pi], dashes[si % 4], kWidth - kRight + 45, legend_y + 4,
                            order_[si], names[pi]);
      legend_y += 16;
    }
  }
  return svg;
}

}  // namespace

std::string LatencySvg(const std::vector<RunResult>& results, const std::string& title) {
  const LatencyPlot plot(results);
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" "
      "fill=\"white\"/>\n<text x=\"%d\" y=\"20\" font-size=\"14\">%s</text>\n",
      kWidth, kHeight, kLeft, title);
  if (plot.empty()) return svg + "<text x=\"100\" y=\"100\">no successful runs</text></svg>\n";
  const bool open = results.front().spec.rate > 0;
  absl::StrAppendFormat(&svg, "%s<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n%s",
                        plot.Axes(), (kLeft + kWidth - kRight) / 2, kHeight - 10,
                        open ? "offered load (requests/s)" : "concurrency (calls in flight)",
                        plot.Lines());
  return svg + "</svg>\n";
}

}  // namespace tandem::bench
