#include "gateway/http_front/strict_json.h"

#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/json_depth.h"
#include "common/log_text.h"

namespace tandem::gateway {
namespace {

using json = nlohmann::ordered_json;

// A key shown as it is in a path; others are quoted and escaped (they reach error messages).
bool PlainKey(const std::string& key) {
  if (key.empty() || key.size() > 64) return false;
  for (const char c : key) {
    if (!absl::ascii_isalnum(c) && c != '_' && c != '-' && c != '$') return false;
  }
  return true;
}

// Builds the document from the parser's events, as nlohmann's own DOM parser does, and checks
// each object's keys with a hash set (the ordered object's own lookup is linear: a body of many
// keys would be quadratic).
class StrictDomSax : public nlohmann::json_sax<json> {
 public:
  bool null() override { return Place(json(nullptr)); }
  bool boolean(bool v) override { return Place(json(v)); }
  bool number_integer(number_integer_t v) override { return Place(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return Place(json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return Place(json(v)); }
  bool string(string_t& v) override { return Place(json(std::move(v))); }
  bool binary(binary_t&) override { return false; }  // JSON text has none
  bool start_object(std::size_t) override { return Open(json::object()); }
  bool start_array(std::size_t) override { return Open(json::array()); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }
  bool key(string_t& k) override {
    Frame& f = frames_.back();
    if (!f.keys.insert(k).second) {
      error_ = absl::StrCat(Path(), ": the key ", QuoteForLog(k), " is given twice");
      return false;
    }
    key_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception&) override {
    error_ =
        absl::StrCat("the request body is not valid JSON: it stops being JSON at byte ", position);
    return false;
  }

  json& root() { return root_; }
  const std::string& error() const { return error_; }

 private:
  struct Frame {
    json* value;
    std::string segment;  // how its parent names it: ".key" or "[3]"
    std::unordered_set<std::string> keys;
  };

  // Where the next value goes: the root, the end of the open array, or the open object's key.
  json* Slot(std::string* segment) {
    if (frames_.empty()) return &root_;
    json& parent = *frames_.back().value;
    if (parent.is_array()) {
      *segment = absl::StrCat("[", parent.size(), "]");
      parent.push_back(nullptr);
      return &parent.back();
    }
    *segment = PlainKey(key_) ? absl::StrCat(".", key_) : absl::StrCat("[", QuoteForLog(key_), "]");
    return &parent[key_];
  }
  bool Place(json&& v) {
    std::string segment;
    *Slot(&segment) = std::move(v);
    return true;
  }
  bool Open(json&& v) {
    std::string segment;
    json* slot = Slot(&segment);
    *slot = std::move(v);
    frames_.push_back(Frame{slot, std::move(segment), {}});
    return true;
  }
  bool Close() {
    frames_.pop_back();
    return true;
  }
  std::string Path() const {
    std::string path;
    for (const Frame& f : frames_) path += f.segment;
    if (!path.empty() && path[0] == '.') path.erase(0, 1);
    return path.empty() ? "the request body" : path;
  }

  json root_;
  std::vector<Frame> frames_;
  std::string key_;
  std::string error_;
};

}  // namespace

absl::StatusOr<nlohmann::ordered_json> ParseStrictJson(absl::string_view text, int max_depth) {
  // The depth first: the events below never nest deeper than this.
  if (absl::Status s = CheckJsonDepth(text, max_depth, ""); !s.ok()) return s;
  StrictDomSax sax;
  if (!json::sax_parse(text.begin(), text.end(), &sax)) {
    return absl::InvalidArgumentError(sax.error());
  }
  return std::move(sax.root());
}

}  // namespace tandem::gateway
