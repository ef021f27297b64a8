#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tandem::workers::upstream {

// Incremental parser of a text/event-stream body (the WHATWG HTML "server-sent events"
// grammar): bytes in, whole events out, however the network splits them. Lines end in LF, CRLF
// or CR; "data:" lines of one event are joined with LF; a blank line ends the event; comments
// (":...") and fields other than data and event are ignored.
class SseParser {
 public:
  struct Event {
    std::string event;  // the "event:" field, empty for the default "message"
    std::string data;
  };

  // `max_event_bytes` bounds one event's data (and one line): an engine that streams without
  // end of line or event cannot make the worker buffer without end.
  explicit SseParser(size_t max_event_bytes) : max_event_bytes_(max_event_bytes) {}

  // Appends the events `bytes` completes to `events`. RESOURCE_EXHAUSTED past the bound; the
  // parser is unusable after an error.
  absl::Status Feed(absl::string_view bytes, std::vector<Event>* events);
  // True when a line or an event was started and not ended (a stream cut short).
  bool HasPartial() const { return !line_.empty() || has_data_ || !event_.empty(); }

 private:
  absl::Status Line(absl::string_view line, std::vector<Event>* events);

  const size_t max_event_bytes_;
  std::string line_;
  bool after_cr_ = false;  // the last byte was CR: an LF now ends nothing more
  std::string event_;
  std::string data_;
  bool has_data_ = false;
};

}  // namespace tandem::workers::upstream
