#include "workers/prefix_cache.h"

#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <vector>

namespace tandem::workers {
namespace {

class FakeSnapshot final : public PrefixSnapshot {
 public:
  FakeSnapshot(int64_t bytes, int id) : bytes_(bytes), id_(id) {}
  int64_t bytes() const override { return bytes_; }
  int id() const { return id_; }

 private:
  int64_t bytes_;
  int id_;
};

std::vector<int32_t> Tokens(int n, int32_t first = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

std::unique_ptr<PrefixSnapshot> Snap(int id, int64_t bytes = 100) {
  return std::make_unique<FakeSnapshot>(bytes, id);
}

int IdOf(const PrefixCache::Match& m) {
  return m.snapshot == nullptr ? -1 : static_cast<const FakeSnapshot*>(m.snapshot)->id();
}

constexpr int64_t kRoom = 1 << 30;

TEST(PrefixCacheTest, FindsTheLongestCachedBlockAlignedPrefixWithinTheLimit) {
  PrefixCache cache({.capacity_bytes = 1 << 20, .block_tokens = 4});
  const std::vector<int32_t> t = Tokens(20);
  const auto all = absl::MakeConstSpan(t);
  EXPECT_TRUE(cache.Insert("", all.first(4), Snap(1), kRoom));
  EXPECT_TRUE(cache.Insert("", all.first(12), Snap(3), kRoom));
  EXPECT_FALSE(cache.Insert("", all.first(6), Snap(9), kRoom)) << "not at a block boundary";

  PrefixCache::Match m = cache.Lookup("", t, 19);
  EXPECT_EQ(IdOf(m), 3);
  EXPECT_EQ(m.tokens, 12);
  // A limit below a snapshot's end passes it by.
  m = cache.Lookup("", t, 11);
  EXPECT_EQ(IdOf(m), 1);
  EXPECT_EQ(m.tokens, 4);
  // Another prompt sharing only the first block.
  std::vector<int32_t> other = Tokens(20);
  other[5] = 99;
  m = cache.Lookup("", other, 19);
  EXPECT_EQ(IdOf(m), 1);
  EXPECT_EQ(cache.stats().hits, 3);
  EXPECT_EQ(cache.stats().tokens_saved, 12 + 4 + 4);
  EXPECT_TRUE(cache.Contains("", all.first(12)));
  EXPECT_FALSE(cache.Contains("", all.first(8)));
}

TEST(PrefixCacheTest, PartitionsNeverMatchEachOther) {
  PrefixCache cache({.capacity_bytes = 1 << 20, .block_tokens = 4});
  const std::vector<int32_t> t = Tokens(9);
  EXPECT_TRUE(cache.Insert("a", absl::MakeConstSpan(t).first(8), Snap(1), kRoom));
  const PrefixCache::Match m = cache.Lookup("b", t, 8);
  EXPECT_EQ(IdOf(m), -1);
  EXPECT_EQ(m.shared_tokens, 0) << "branch points are per partition too";
  EXPECT_EQ(IdOf(cache.Lookup("a", t, 8)), 1);
  EXPECT_EQ(cache.stats().misses, 1);
}

TEST(PrefixCacheTest, AHashCollisionIsAMissNotAnotherPromptsState) {
  // One hash bit: every prefix of a block collides with every other.
  PrefixCache cache({.capacity_bytes = 1 << 20, .block_tokens = 4, .hash_mask = 1});
  const std::vector<int32_t> a = Tokens(5, 0);
  const std::vector<int32_t> b = Tokens(5, 100);
  ASSERT_TRUE(cache.Insert("", absl::MakeConstSpan(a).first(4), Snap(1), kRoom));
  for (int32_t first = 100; first < 140; ++first) {
    EXPECT_EQ(IdOf(cache.Lookup("", Tokens(5, first), 4)), -1) << first;
  }
  EXPECT_EQ(IdOf(cache.Lookup("", a, 4)), 1);
  // The same for partitions that collide.
  EXPECT_EQ(IdOf(cache.Lookup("other", a, 4)), -1);
  (void)b;
}

TEST(PrefixCacheTest, EvictsLeastRecentlyUsedToStayWithinCapacityAndRoom) {
  // Each entry: 100 bytes of snapshot plus its 4 tokens (16 bytes).
  PrefixCache cache({.capacity_bytes = 3 * 116, .block_tokens = 4});
  std::vector<std::vector<int32_t>> p;
  for (int i = 0; i < 4; ++i) p.push_back(Tokens(4, 10 * i));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(cache.Insert("", p[i], Snap(i), kRoom));
  EXPECT_EQ(cache.bytes(), 3 * 116);
  // Touch 0, so that 1 is the least recently used.
  EXPECT_EQ(IdOf(cache.Lookup("", Tokens(5, 0), 4)), 0);
  ASSERT_TRUE(cache.Insert("", p[3], Snap(3), kRoom));
  EXPECT_TRUE(cache.Contains("", p[0]));
  EXPECT_FALSE(cache.Contains("", p[1]));
  EXPECT_EQ(cache.stats().evictions, 1);
  EXPECT_EQ(cache.stats().entries, 3);

  // The engine's room (its budget less its sequences) bounds the cache below its capacity.
  EXPECT_FALSE(cache.Fits(1000, 4, kRoom));
  EXPECT_TRUE(cache.Fits(100, 4, /*room_bytes=*/0)) << "by evicting its own";
  EXPECT_FALSE(PrefixCache({.capacity_bytes = 0, .block_tokens = 4}).Fits(1, 4, kRoom));
  EXPECT_FALSE(cache.Insert("", Tokens(4, 77), Snap(7, 1000), kRoom)) << "larger than capacity";
  EXPECT_TRUE(cache.Insert("", Tokens(4, 88), Snap(8), /*room_bytes=*/0));
  EXPECT_EQ(cache.bytes(), 3 * 116) << "made its own room";
  EXPECT_EQ(cache.EvictTo(116), 2 * 116);
  EXPECT_EQ(cache.stats().entries, 1);
  EXPECT_TRUE(cache.Contains("", Tokens(4, 88)));
  cache.Erase("", Tokens(4, 88));
  EXPECT_EQ(cache.bytes(), 0);
}

TEST(PrefixCacheTest, RemembersWherePromptsBranch) {
  PrefixCache cache({.capacity_bytes = 1 << 20, .block_tokens = 4});
  std::vector<int32_t> first = Tokens(14);
  EXPECT_EQ(cache.Lookup("", first, 13).shared_tokens, 0);
  std::vector<int32_t> second = Tokens(14);
  second[9] = 500;  // the third block differs
  const PrefixCache::Match m = cache.Lookup("", second, 13);
  EXPECT_EQ(m.snapshot, nullptr);
  EXPECT_EQ(m.shared_tokens, 8);
}

TEST(PrefixCacheTest, ADisabledCacheHoldsNothing) {
  PrefixCache cache({.capacity_bytes = 0, .block_tokens = 4});
  EXPECT_FALSE(cache.enabled());
  EXPECT_FALSE(cache.Insert("", Tokens(4), Snap(1), kRoom));
  EXPECT_EQ(IdOf(cache.Lookup("", Tokens(9), 8)), -1);
  EXPECT_EQ(cache.stats().misses, 0) << "no lookups counted when off";
}

}  // namespace
}  // namespace tandem::workers
