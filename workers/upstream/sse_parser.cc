#include "workers/upstream/sse_parser.h"

#include "absl/strings/str_cat.h"

namespace tandem::workers::upstream {

absl::Status SseParser::Feed(absl::string_view bytes, std::vector<Event>* events) {
  size_t start = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    if (c != '\n' && c != '\r') continue;
    if (c == '\n' && after_cr_ && i == start && line_.empty()) {
      after_cr_ = false;  // the LF of a CRLF whose CR ended the line
      start = i + 1;
      continue;
    }
    line_.append(bytes.data() + start, i - start);
    after_cr_ = c == '\r';
    start = i + 1;
    std::string line;
    line.swap(line_);
    if (absl::Status s = Line(line, events); !s.ok()) return s;
  }
  if (start < bytes.size()) {
    after_cr_ = false;
    line_.append(bytes.data() + start, bytes.size() - start);
    if (line_.size() > max_event_bytes_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("engine stream: a line longer than ", max_event_bytes_, " bytes"));
    }
  }
  return absl::OkStatus();
}

absl::Status SseParser::Line(absl::string_view line, std::vector<Event>* events) {
  if (line.empty()) {
    if (has_data_) events->push_back(Event{std::move(event_), std::move(data_)});
    event_.clear();
    data_.clear();
    has_data_ = false;
    return absl::OkStatus();
  }
  if (line[0] == ':') return absl::OkStatus();
  const size_t colon = line.find(':');
  absl::string_view field = line.substr(0, colon);
  absl::string_view value;
  if (colon != absl::string_view::npos) {
    value = line.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) data_.push_back('\n');
    data_.append(value.data(), value.size());
    has_data_ = true;
    if (data_.size() > max_event_bytes_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("engine stream: an event larger than ", max_event_bytes_, " bytes"));
    }
  } else if (field == "event") {
    event_.assign(value.data(), value.size());
  }
  return absl::OkStatus();
}

}  // namespace tandem::workers::upstream
