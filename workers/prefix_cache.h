#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tandem::workers {

// What an engine needs to resume a sequence at a block boundary: for a hybrid model the
// recurrent and conv states of its linear-attention/Mamba layers plus its attention layers' KV
// up to that point. Engine-specific; the cache only owns it and counts its bytes.
class PrefixSnapshot {
 public:
  virtual ~PrefixSnapshot() = default;
  virtual int64_t bytes() const = 0;
};

struct PrefixCacheOptions {
  // Most bytes of snapshots held; 0 disables the cache.
  int64_t capacity_bytes = 0;
  // Tokens per block: snapshots are taken only at multiples of it.
  int32_t block_tokens = 256;
  // Block hashes remembered without a snapshot, to find where prompts branch.
  int32_t max_seen_blocks = 1 << 16;
  // Applied to every hash. Tests narrow it to make collisions happen; keep all bits otherwise.
  uint64_t hash_mask = ~uint64_t{0};
};

struct PrefixCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t tokens_saved = 0;
  int64_t evictions = 0;
  int64_t entries = 0;
  int64_t bytes = 0;
  int64_t inserts = 0;
};

// Snapshots of sequences at block boundaries, keyed by the prefix that led there: a chained
// hash over blocks of `block_tokens` tokens, seeded by a partition (the tenant) so that one
// tenant's prompts never match another's. A hit compares the whole prefix's tokens and
// partition, so a hash collision is a miss, never a wrong state. Eviction is least recently
// used. Engines copy a snapshot's state when a sequence starts from it, so nothing here is
// used by a running sequence and any entry may be evicted. Not thread-safe: the engine thread
// owns it.
class PrefixCache {
 public:
  explicit PrefixCache(PrefixCacheOptions options);

  bool enabled() const { return options_.capacity_bytes > 0; }
  int32_t block_tokens() const { return options_.block_tokens; }

  struct Match {
    // The longest cached prefix (nullptr and 0 on a miss); valid until the next mutation.
    const PrefixSnapshot* snapshot = nullptr;
    int64_t tokens = 0;
    // The longest block-aligned prefix an earlier prompt of this partition shared (with or
    // without a snapshot): a branch point worth a snapshot when deeper than `tokens`.
    int64_t shared_tokens = 0;
  };
  // The longest cached prefix of `tokens` of at most `max_tokens` tokens. Counts a hit or a
  // miss and remembers the prompt's blocks for later branch points.
  Match Lookup(absl::string_view partition, absl::Span<const int32_t> tokens, int64_t max_tokens);

  // Whether `prefix` (a multiple of block_tokens long) has a snapshot.
  bool Contains(absl::string_view partition, absl::Span<const int32_t> prefix) const;
  // Takes a snapshot of `prefix` (a multiple of block_tokens long; others are ignored), evicting
  // the least recently used until it fits. Returns false (and drops it) when it alone is larger
  // than the capacity or `room_bytes` (what the engine's memory budget leaves) is too small.
  bool Insert(absl::string_view partition, absl::Span<const int32_t> prefix,
              std::unique_ptr<PrefixSnapshot> snapshot, int64_t room_bytes);
  // Whether a snapshot of `bytes` over `tokens` tokens would be kept by Insert with `room_bytes`:
  // asked before making one, so that a snapshot the cache would drop is never copied.
  bool Fits(int64_t bytes, int64_t tokens, int64_t room_bytes) const;
  // Drops the snapshot of `prefix`, if any.
  void Erase(absl::string_view partition, absl::Span<const int32_t> prefix);
  // Evicts least recently used snapshots until at most `target_bytes` remain; bytes freed.
  int64_t EvictTo(int64_t target_bytes);

  int64_t bytes() const { return bytes_; }
  const PrefixCacheStats& stats() const { return stats_; }

 private:
  struct Entry {
    std::string partition;
    std::vector<int32_t> tokens;
    std::unique_ptr<PrefixSnapshot> snapshot;
    std::list<uint64_t>::iterator lru;
  };

  // Chained hashes of the first `blocks` blocks of `tokens`: [i] covers blocks 0..i.
  std::vector<uint64_t> BlockHashes(absl::string_view partition, absl::Span<const int32_t> tokens,
                                    int64_t blocks) const;
  const Entry* Find(uint64_t hash, absl::string_view partition,
                    absl::Span<const int32_t> prefix) const;
  void Remember(const std::vector<uint64_t>& hashes);
  void Drop(std::unordered_map<uint64_t, Entry>::iterator it);

  const PrefixCacheOptions options_;
  std::unordered_map<uint64_t, Entry> entries_;
  std::list<uint64_t> lru_;  // front: most recently used
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> seen_;
  std::list<uint64_t> seen_lru_;
  int64_t bytes_ = 0;
  PrefixCacheStats stats_;
};

}  // namespace tandem::workers
