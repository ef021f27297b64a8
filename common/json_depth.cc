#include "common/json_depth.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log_text.h"

namespace tandem {
namespace {

// An open array or object during the scan, and which of its members the scan is in.
struct Frame {
  bool array = false;
  int64_t index = 0;        // arrays: the member's index
  absl::string_view key;    // objects: the member's key as written (escapes not decoded)
  bool expect_key = false;  // objects: the next string is a key
};

// Path segments shown before "...": enough to tell which field a deep value sits in.
constexpr size_t kPathSegments = 8;

bool PlainKey(absl::string_view key) {
  return !key.empty() && key.size() <= 32 && std::all_of(key.begin(), key.end(), [](char c) {
           return absl::ascii_isalnum(c) || c == '_' || c == '-' || c == '$';
         });
}

std::string PathOf(const std::vector<Frame>& frames) {
  if (frames.empty()) return "(top)";
  std::string path;
  for (size_t i = 0; i < frames.size() && i < kPathSegments; ++i) {
    const Frame& f = frames[i];
    if (f.array) {
      absl::StrAppend(&path, "[", f.index, "]");
    } else if (PlainKey(f.key)) {
      absl::StrAppend(&path, path.empty() ? "" : ".", f.key);
    } else {
      absl::StrAppend(&path, "[", QuoteForLog(f.key, 32), "]");
    }
  }
  if (frames.size() > kPathSegments) path += "...";
  return path;
}

absl::Status TooDeep(absl::string_view field, int max_depth, const std::vector<Frame>& frames) {
  const std::string limit =
      absl::StrFormat("JSON nested deeper than %d levels (--max_json_depth)", max_depth);
  if (field.empty()) return absl::InvalidArgumentError(absl::StrCat(PathOf(frames), ": ", limit));
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", limit, " at ", PathOf(frames)));
}

// Inside a string literal: `c` moves past escapes and the closing quote. Returns whether the
// string ended at `c`.
bool StringEndsAt(char c, bool* escaped) {
  if (*escaped) {
    *escaped = false;
  } else if (c == '\\') {
    *escaped = true;
  } else if (c == '"') {
    return true;
  }
  return false;
}

}  // namespace

int JsonNestingDepth(absl::string_view text) {
  int depth = 0;
  int deepest = 0;
  bool in_string = false;
  bool escaped = false;
  for (const char c : text) {
    if (in_string) {
      in_string = !StringEndsAt(c, &escaped);
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

absl::Status CheckJsonDepth(absl::string_view text, int max_depth, absl::string_view field) {
  std::vector<Frame> frames;
  frames.reserve(std::min(max_depth, 256));
  bool in_string = false;
  bool escaped = false;
  size_t key_start = absl::string_view::npos;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (StringEndsAt(c, &escaped)) {
        in_string = false;
        if (key_start != absl::string_view::npos) {
          frames.back().key = text.substr(key_start, i - key_start);
          key_start = absl::string_view::npos;
        }
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        if (!frames.empty() && !frames.back().array && frames.back().expect_key) {
          frames.back().expect_key = false;
          key_start = i + 1;
        }
        break;
      case '{':
      case '[':
        if (static_cast<int>(frames.size()) >= max_depth) return TooDeep(field, max_depth, frames);
        frames.push_back(Frame{.array = c == '[', .index = 0, .key = {}, .expect_key = c == '{'});
        break;
      case '}':
      case ']':
        if (!frames.empty()) frames.pop_back();
        break;
      case ',':
        if (!frames.empty()) {
          if (frames.back().array) {
            ++frames.back().index;
          } else {
            frames.back().expect_key = true;
          }
        }
        break;
      default:
        break;
    }
  }
  return absl::OkStatus();
}

}  // namespace tandem
