#include "policies/yaml_reader.h"

#include <yaml-cpp/anchor.h>
#include <yaml-cpp/eventhandler.h>

#include <cmath>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace tandem::policies {

std::string PolicyError::ToString() const {
  return absl::StrCat(file, ":", line, ":", column, ": ", path.empty() ? "(top)" : path, ": ",
                      message);
}

namespace {

// Counts the nodes of the first document as a walk of its tree would visit them, from the
// parser's events: no tree is built, and an alias adds the size of the node it names, known
// once that node has ended. Throws OverLimit past the limit, and past kMaxYamlDepth open
// collections (yaml-cpp's parser recurses once per level and, deep enough, fails with only "bad
// file").
class NodeCounter : public YAML::EventHandler {
 public:
  enum class Why {
    kNodes,      // more than the node limit
    kRecursive,  // an alias inside the node it names: an endless tree
    kDepth,      // nested deeper than kMaxYamlDepth
  };
  struct OverLimit {
    YAML::Mark mark;
    Why why;
  };

  explicit NodeCounter(int64_t limit) : limit_(limit) {}

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override { Leaf(mark, anchor, 1); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    auto it = sizes_.find(anchor);
    if (it == sizes_.end()) throw OverLimit{mark, Why::kRecursive};  // still open: contains it
    Leaf(mark, 0, it->second);
  }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                const std::string&) override {
    Leaf(mark, anchor, 1);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    Open(mark, anchor);
  }
  void OnSequenceEnd() override { Close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    Open(mark, anchor);
  }
  void OnMapEnd() override { Close(); }

 private:
  struct Frame {
    YAML::anchor_t anchor;
    int64_t size;
  };

  // `n` <= limit_ (an anchored node's size was checked when it ended), so total_ never overflows.
  void Add(const YAML::Mark& mark, int64_t n) {
    total_ += n;
    if (total_ > limit_) throw OverLimit{mark, Why::kNodes};
  }
  void Leaf(const YAML::Mark& mark, YAML::anchor_t anchor, int64_t n) {
    Add(mark, n);
    if (!open_.empty()) open_.back().size += n;
    if (anchor != YAML::NullAnchor) sizes_[anchor] = n;
  }
  void Open(const YAML::Mark& mark, YAML::anchor_t anchor) {
    if (open_.size() >= static_cast<size_t>(kMaxYamlDepth)) throw OverLimit{mark, Why::kDepth};
    Add(mark, 1);
    open_.push_back({anchor, 1});
  }
  void Close() {
    const Frame done = open_.back();
    open_.pop_back();
    if (!open_.empty()) open_.back().size += done.size;
    if (done.anchor != YAML::NullAnchor) sizes_[done.anchor] = done.size;
  }

  const int64_t limit_;
  int64_t total_ = 0;
  std::vector<Frame> open_;                  // the collections being read, outermost first
  std::map<YAML::anchor_t, int64_t> sizes_;  // nodes under each ended anchor, aliases expanded
};

// YAML requires a map's keys to be unique, but yaml-cpp keeps every entry of a repeated key: a
// loader that iterates the map sees both while node[key] finds the first, and the two disagree.
// Reports every repeated scalar key, at the repeat. Bounded like the loaders' own walk: the
// document passed the node count and depth limits first.
void ReportRepeatedKeys(const YAML::Node& node, const std::string& path, const std::string& file,
                        std::vector<PolicyError>* errors) {
  if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) {
      ReportRepeatedKeys(node[i], absl::StrCat(path, "[", i, "]"), file, errors);
    }
    return;
  }
  if (!node.IsMap()) return;
  std::map<std::string, YAML::Mark> seen;
  for (const auto& entry : node) {
    const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : "?";
    const std::string key_path = path.empty() ? key : absl::StrCat(path, ".", key);
    if (entry.first.IsScalar()) {
      const auto [first, inserted] = seen.emplace(key, entry.first.Mark());
      if (!inserted) {
        const YAML::Mark m = entry.first.Mark();
        errors->push_back({file, m.line + 1, m.column + 1, key_path,
                           absl::StrCat("duplicate key (first at line ", first->second.line + 1,
                                        "; YAML's keys are unique)")});
      }
    }
    ReportRepeatedKeys(entry.second, key_path, file, errors);
  }
}

}  // namespace

YAML::Node LoadYaml(const std::string& text, const std::string& file,
                    std::vector<PolicyError>* errors, int64_t max_nodes,
                    absl::string_view limit_name) {
  try {
    // Counted first, so that YAML::Load never builds more than max_nodes nodes either.
    std::istringstream in(text);
    YAML::Parser parser(in);
    NodeCounter counter(max_nodes);
    parser.HandleNextDocument(counter);
    YAML::Node root = YAML::Load(text);
    const size_t before = errors->size();
    ReportRepeatedKeys(root, "", file, errors);
    return errors->size() == before ? root : YAML::Node();
  } catch (const NodeCounter::OverLimit& e) {
    std::string message;
    switch (e.why) {
      case NodeCounter::Why::kRecursive:
        message = "an alias refers to a node that contains it (an endless document)";
        break;
      case NodeCounter::Why::kDepth:
        message = absl::StrCat("nested deeper than ", kMaxYamlDepth,
                               " levels of maps and sequences (this line opens the next one)");
        break;
      case NodeCounter::Why::kNodes:
        message = absl::StrCat("more than ", max_nodes,
                               " YAML nodes, counting each alias as the nodes it names (",
                               limit_name, ")");
        break;
    }
    errors->push_back({file, e.mark.line + 1, e.mark.column + 1, "", std::move(message)});
    return YAML::Node();
  } catch (const YAML::Exception& e) {
    errors->push_back({file, e.mark.line + 1, e.mark.column + 1, "", e.msg});
    return YAML::Node();
  }
}

void YamlReader::Error(const YAML::Node& at, const std::string& path, const std::string& message) {
  const YAML::Mark m = at.Mark();
  errors_->push_back({file_, m.line + 1, m.column + 1, path, message});
}

bool YamlReader::Map(const YAML::Node& node, const std::string& path,
                     const std::set<std::string>& allowed) {
  if (!node.IsMap()) {
    Error(node, path, "expected a map");
    return false;
  }
  // (A repeated key never gets here: LoadYaml refuses the document.)
  for (const auto& kv : node) {
    const std::string key = kv.first.Scalar();
    const std::string key_path = path.empty() ? key : absl::StrCat(path, ".", key);
    if (!allowed.empty() && !allowed.contains(key)) {
      Error(kv.first, key_path,
            absl::StrCat("unknown key; expected one of: ", absl::StrJoin(allowed, ", ")));
    }
  }
  return true;
}

bool YamlReader::FreeMap(const YAML::Node& node, const std::string& path) {
  return Map(node, path, {});
}

bool YamlReader::String(const YAML::Node& node, const std::string& path, std::string* out) {
  if (!node.IsScalar() || node.Scalar().empty()) {
    Error(node, path, "expected a non-empty string");
    return false;
  }
  *out = node.Scalar();
  return true;
}

bool YamlReader::Number(const YAML::Node& node, const std::string& path, double* out) {
  if (!node.IsScalar() || !YAML::convert<double>::decode(node, *out) || !std::isfinite(*out)) {
    Error(node, path, "expected a finite number");
    return false;
  }
  return true;
}

bool YamlReader::Integer(const YAML::Node& node, const std::string& path, int64_t lo, int64_t hi,
                         int64_t* out) {
  long long v = 0;
  if (!node.IsScalar() || !YAML::convert<long long>::decode(node, v)) {
    Error(node, path, "expected an integer");
    return false;
  }
  if (v < lo || v > hi) {
    Error(node, path, absl::StrCat(v, " is out of range [", lo, ", ", hi, "]"));
    return false;
  }
  *out = v;
  return true;
}

bool YamlReader::Duration(const YAML::Node& node, const std::string& path, double* seconds) {
  absl::Duration d;
  if (node.IsScalar() && YAML::convert<double>::decode(node, *seconds) && std::isfinite(*seconds) &&
      *seconds >= 0) {
    return true;
  }
  if (!node.IsScalar() || !absl::ParseDuration(node.Scalar(), &d) || d < absl::ZeroDuration() ||
      d == absl::InfiniteDuration()) {
    Error(node, path, "expected a duration such as 250ms, 2s or 1m (or a number of seconds)");
    return false;
  }
  *seconds = absl::ToDoubleSeconds(d);
  return true;
}

bool YamlReader::Bool(const YAML::Node& node, const std::string& path, bool* out) {
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, *out)) {
    Error(node, path, "expected true or false");
    return false;
  }
  return true;
}

}  // namespace tandem::policies
