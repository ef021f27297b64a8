#include "common/prometheus_text.h"

#include <cmath>
#include <cstdlib>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"

namespace tandem {
namespace {

bool NameStart(char c) { return absl::ascii_isalpha(c) || c == '_' || c == ':'; }
bool NameChar(char c) { return NameStart(c) || absl::ascii_isdigit(c); }

class LineParser {
 public:
  LineParser(std::string_view line, int line_no) : s_(line), line_no_(line_no) {}

  absl::Status Parse(Sample* out) {
    if (!Name(&out->name, /*metric=*/true)) return Error("expected a metric name");
    bool spaced = SkipSpaces();
    if (Peek() == '{') {
      ++i_;
      while (true) {
        SkipSpaces();
        if (Peek() == '}') {
          ++i_;
          break;
        }
        std::string key;
        if (!Name(&key, /*metric=*/false)) return Error("expected a label name");
        SkipSpaces();
        if (Peek() != '=') return Error("expected '=' after the label name");
        ++i_;
        SkipSpaces();
        std::string value;
        if (absl::Status s = Quoted(&value); !s.ok()) return s;
        if (!out->labels.emplace(std::move(key), std::move(value)).second) {
          return Error("duplicate label");
        }
        SkipSpaces();
        if (Peek() == ',') {
          ++i_;
        } else if (Peek() != '}') {
          return Error("expected ',' or '}' in the label set");
        }
      }
      spaced = SkipSpaces();
    }
    if (!spaced) return Error("expected a space before the value");
    const size_t start = i_;
    while (i_ < s_.size() && s_[i_] != ' ' && s_[i_] != '\t') ++i_;
    if (!ParseValue(s_.substr(start, i_ - start), &out->value)) {
      return Error("expected a number (or +Inf, -Inf, NaN) as the value");
    }
    SkipSpaces();
    if (i_ < s_.size()) {  // optional timestamp in milliseconds
      int64_t ts;
      const size_t ts_start = i_;
      while (i_ < s_.size() && s_[i_] != ' ' && s_[i_] != '\t') ++i_;
      if (!absl::SimpleAtoi(absl::string_view(s_.data() + ts_start, i_ - ts_start), &ts)) {
        return Error("expected an integer timestamp after the value");
      }
      SkipSpaces();
      if (i_ < s_.size()) return Error("unexpected text after the sample");
    }
    return absl::OkStatus();
  }

 private:
  char Peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  bool SkipSpaces() {
    const size_t start = i_;
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t')) ++i_;
    return i_ > start;
  }
  bool Name(std::string* out, bool metric) {
    if (i_ >= s_.size() || !(metric ? NameStart(s_[i_]) : (NameStart(s_[i_]) && s_[i_] != ':'))) {
      return false;
    }
    const size_t start = i_;
    while (i_ < s_.size() && NameChar(s_[i_]) && (metric || s_[i_] != ':')) ++i_;
    out->assign(s_.substr(start, i_ - start));
    return true;
  }
  absl::Status Quoted(std::string* out) {
    if (Peek() != '"') return Error("expected '\"' to open the label value");
    ++i_;
    while (i_ < s_.size()) {
      const char c = s_[i_++];
      if (c == '"') return absl::OkStatus();
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (i_ >= s_.size()) break;
      const char e = s_[i_++];
      if (e == 'n') {
        out->push_back('\n');
      } else if (e == '\\' || e == '"') {
        out->push_back(e);
      } else {
        return Error("unknown escape in the label value (only \\\\, \\\" and \\n)");
      }
    }
    return Error("unterminated label value");
  }
  static bool ParseValue(std::string_view v, double* out) {
    if (v == "+Inf" || v == "Inf") {
      *out = std::numeric_limits<double>::infinity();
      return true;
    }
    if (v == "-Inf") {
      *out = -std::numeric_limits<double>::infinity();
      return true;
    }
    if (v == "NaN") {
      *out = std::nan("");
      return true;
    }
    return !v.empty() && absl::SimpleAtod(absl::string_view(v.data(), v.size()), out) &&
           !std::isnan(*out);
  }
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrFormat("metrics text line %d column %d: %s", line_no_, i_ + 1, what));
  }

  std::string_view s_;
  size_t i_ = 0;
  const int line_no_;
};

}  // namespace

absl::StatusOr<std::vector<Sample>> ParsePrometheusText(std::string_view text) {
  std::vector<Sample> samples;
  int line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t first = 0;
    while (first < line.size() && (line[first] == ' ' || line[first] == '\t')) ++first;
    line.remove_prefix(first);
    if (line.empty() || line[0] == '#') continue;
    Sample sample;
    if (absl::Status s = LineParser(line, line_no).Parse(&sample); !s.ok()) return s;
    samples.push_back(std::move(sample));
  }
  return samples;
}

bool LabelsMatch(const std::map<std::string, std::string>& labels,
                 const std::map<std::string, std::string>& want) {
  for (const auto& [k, v] : want) {
    auto it = labels.find(k);
    if (it == labels.end() || it->second != v) return false;
  }
  return true;
}

}  // namespace tandem
