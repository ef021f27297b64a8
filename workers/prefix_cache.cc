#include "workers/prefix_cache.h"

#include <algorithm>

#include "common/split_mix.h"

namespace tandem::workers {
namespace {

uint64_t HashBytes(absl::string_view s) {
  uint64_t h = SplitMix64(s.size());
  for (const char c : s) h = SplitMix64(h ^ static_cast<unsigned char>(c));
  return h;
}

}  // namespace

namespace {
PrefixCacheOptions Checked(PrefixCacheOptions o) {
  o.block_tokens = std::max(o.block_tokens, 1);  // checked at start-up; never 0 here
  return o;
}
}  // namespace

PrefixCache::PrefixCache(PrefixCacheOptions options) : options_(Checked(options)) {}

std::vector<uint64_t> PrefixCache::BlockHashes(absl::string_view partition,
                                               absl::Span<const int32_t> tokens,
                                               int64_t blocks) const {
  std::vector<uint64_t> out;
  out.reserve(static_cast<size_t>(std::max<int64_t>(blocks, 0)));
  uint64_t h = HashBytes(partition);
  const int64_t n = options_.block_tokens;
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t i = b * n; i < (b + 1) * n; ++i) {
      h = SplitMix64(h ^ static_cast<uint32_t>(tokens[static_cast<size_t>(i)]));
    }
    out.push_back(h & options_.hash_mask);
  }
  return out;
}

const PrefixCache::Entry* PrefixCache::Find(uint64_t hash, absl::string_view partition,
                                            absl::Span<const int32_t> prefix) const {
  auto it = entries_.find(hash);
  if (it == entries_.end()) return nullptr;
  const Entry& e = it->second;
  // A colliding hash of another prefix is a miss.
  if (e.partition != partition || absl::MakeConstSpan(e.tokens) != prefix) return nullptr;
  return &e;
}

void PrefixCache::Remember(const std::vector<uint64_t>& hashes) {
  for (const uint64_t h : hashes) {
    auto it = seen_.find(h);
    if (it != seen_.end()) {
      seen_lru_.splice(seen_lru_.begin(), seen_lru_, it->second);
      continue;
    }
    seen_lru_.push_front(h);
    seen_[h] = seen_lru_.begin();
    if (static_cast<int64_t>(seen_.size()) > options_.max_seen_blocks) {
      seen_.erase(seen_lru_.back());
      seen_lru_.pop_back();
    }
  }
}

PrefixCache::Match PrefixCache::Lookup(absl::string_view partition,
                                       absl::Span<const int32_t> tokens, int64_t max_tokens) {
  Match m;
  if (!enabled()) return m;
  const int64_t n = options_.block_tokens;
  const int64_t limit = std::min<int64_t>(max_tokens, static_cast<int64_t>(tokens.size()));
  const std::vector<uint64_t> hashes =
      BlockHashes(partition, tokens, static_cast<int64_t>(tokens.size()) / n);
  for (int64_t b = static_cast<int64_t>(hashes.size()) - 1; b >= 0; --b) {
    if (seen_.contains(hashes[static_cast<size_t>(b)])) {
      m.shared_tokens = (b + 1) * n;
      break;
    }
  }
  for (int64_t b = limit / n - 1; b >= 0; --b) {
    const Entry* e = Find(hashes[static_cast<size_t>(b)], partition,
                          tokens.first(static_cast<size_t>((b + 1) * n)));
    if (e == nullptr) continue;
    lru_.splice(lru_.begin(), lru_, e->lru);
    m.snapshot = e->snapshot.get();
    m.tokens = (b + 1) * n;
    break;
  }
  Remember(hashes);
  if (m.snapshot != nullptr) {
    ++stats_.hits;
    stats_.tokens_saved += m.tokens;
  } else {
    ++stats_.misses;
  }
  return m;
}

bool PrefixCache::Contains(absl::string_view partition, absl::Span<const int32_t> prefix) const {
  const int64_t n = options_.block_tokens;
  const int64_t len = static_cast<int64_t>(prefix.size());
  if (!enabled() || len == 0 || len % n != 0) return false;
  return Find(BlockHashes(partition, prefix, len / n).back(), partition, prefix) != nullptr;
}

bool PrefixCache::Insert(absl::string_view partition, absl::Span<const int32_t> prefix,
                         std::unique_ptr<PrefixSnapshot> snapshot, int64_t room_bytes) {
  const int64_t n = options_.block_tokens;
  const int64_t len = static_cast<int64_t>(prefix.size());
  if (!enabled() || snapshot == nullptr || len == 0 || len % n != 0) return false;
  if (!Fits(snapshot->bytes(), len, room_bytes)) return false;
  const int64_t size = snapshot->bytes() + len * static_cast<int64_t>(sizeof(int32_t));
  const int64_t cap = std::min(options_.capacity_bytes, bytes_ + room_bytes);
  const uint64_t hash = BlockHashes(partition, prefix, len / n).back();
  // The same prefix again, or a collision: the newer one stays.
  if (auto old = entries_.find(hash); old != entries_.end()) Drop(old);
  EvictTo(cap - size);
  lru_.push_front(hash);
  Entry& e = entries_[hash];
  e.partition = std::string(partition);
  e.tokens.assign(prefix.begin(), prefix.end());
  e.snapshot = std::move(snapshot);
  e.lru = lru_.begin();
  bytes_ += size;
  ++stats_.inserts;
  stats_.entries = static_cast<int64_t>(entries_.size());
  stats_.bytes = bytes_;
  return true;
}

void PrefixCache::Drop(std::unordered_map<uint64_t, Entry>::iterator it) {
  bytes_ -= it->second.snapshot->bytes() +
            static_cast<int64_t>(it->second.tokens.size() * sizeof(int32_t));
  lru_.erase(it->second.lru);
  entries_.erase(it);
  stats_.entries = static_cast<int64_t>(entries_.size());
  stats_.bytes = bytes_;
}

bool PrefixCache::Fits(int64_t bytes, int64_t tokens, int64_t room_bytes) const {
  const int64_t size = bytes + tokens * static_cast<int64_t>(sizeof(int32_t));
  return enabled() && size <= std::min(options_.capacity_bytes, bytes_ + room_bytes);
}

void PrefixCache::Erase(absl::string_view partition, absl::Span<const int32_t> prefix) {
  const int64_t n = options_.block_tokens;
  const int64_t len = static_cast<int64_t>(prefix.size());
  if (!enabled() || len == 0 || len % n != 0) return;
  const uint64_t hash = BlockHashes(partition, prefix, len / n).back();
  if (Find(hash, partition, prefix) != nullptr) Drop(entries_.find(hash));
}

int64_t PrefixCache::EvictTo(int64_t target_bytes) {
  const int64_t before = bytes_;
  while (bytes_ > std::max<int64_t>(target_bytes, 0) && !lru_.empty()) {
    Drop(entries_.find(lru_.back()));
    ++stats_.evictions;
  }
  return before - bytes_;
}

}  // namespace tandem::workers
