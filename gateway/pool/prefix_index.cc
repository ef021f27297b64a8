#include "gateway/pool/prefix_index.h"

#include <string>
#include <utility>

#include "absl/hash/hash.h"
#include "router/request_features.h"

namespace tandem::gateway {
namespace {

uint64_t Chain(uint64_t prev, std::string_view bytes) {
  return absl::Hash<std::pair<uint64_t, std::string_view>>{}({prev, bytes});
}

uint64_t Key(uint64_t prefix, std::string_view endpoint) { return Chain(prefix, endpoint); }

// Text tokens of a message, estimated (images add no estimate: a lower bound).
int64_t EstimateMessage(const tandem::v1::ChatMessage& m) {
  int64_t n = 4;  // the chat template's role markers
  for (const auto& part : m.content()) {
    if (part.has_text()) n += router::EstimateTokens(part.text());
  }
  for (const auto& call : m.tool_calls()) n += router::EstimateTokens(call.arguments_json()) + 8;
  return n;
}

}  // namespace

PromptPrefix PromptPrefixOf(std::string_view partition,
                            const tandem::v1::GenerateRequest& request) {
  PromptPrefix out;
  uint64_t h = Chain(0, partition);
  int64_t tokens = 0;
  std::string bytes;
  if (request.tools_size() > 0) {
    for (const auto& tool : request.tools()) {
      bytes.clear();
      tool.SerializeToString(&bytes);
      h = Chain(h, bytes);
      tokens += router::EstimateTokens(tool.description()) +
                router::EstimateTokens(tool.parameters_json()) + 8;
    }
    out.hashes.push_back(h);
    out.tokens.push_back(tokens);
  }
  for (const auto& m : request.messages()) {
    bytes.clear();
    m.SerializeToString(&bytes);  // images by their bytes: the same picture, the same prefix
    h = Chain(h, bytes);
    tokens += EstimateMessage(m);
    out.hashes.push_back(h);
    out.tokens.push_back(tokens);
  }
  return out;
}

int64_t PrefixIndex::HitTokens(const PromptPrefix& prefix, std::string_view endpoint) const {
  absl::MutexLock l(&mu_);
  for (size_t i = prefix.hashes.size(); i-- > 0;) {
    if (entries_.contains(Key(prefix.hashes[i], endpoint))) return prefix.tokens[i];
  }
  return 0;
}

void PrefixIndex::Record(const PromptPrefix& prefix, std::string_view endpoint) {
  absl::MutexLock l(&mu_);
  for (const uint64_t p : prefix.hashes) {
    const uint64_t key = Key(p, endpoint);
    if (auto it = entries_.find(key); it != entries_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      continue;
    }
    lru_.push_front(key);
    entries_[key] = lru_.begin();
    while (static_cast<int64_t>(entries_.size()) > max_entries_) {
      entries_.erase(lru_.back());
      lru_.pop_back();
    }
  }
}

int64_t PrefixIndex::size() const {
  absl::MutexLock l(&mu_);
  return static_cast<int64_t>(entries_.size());
}

}  // namespace tandem::gateway
