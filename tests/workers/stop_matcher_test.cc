#include "workers/stop_matcher.h"

#include "gtest/gtest.h"

namespace tandem::workers {
namespace {

TEST(StopMatcherTest, WithoutStopsEverythingPassesAtOnce) {
  StopMatcher m({});
  bool stopped = true;
  EXPECT_EQ(m.Push("hello", &stopped), "hello");
  EXPECT_FALSE(stopped);
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcherTest, CatchesAStopSplitAcrossPushesAndNeverEmitsIt) {
  StopMatcher m({"END"});
  bool stopped = false;
  std::string out = m.Push("abcE", &stopped);
  EXPECT_FALSE(stopped);
  out += m.Push("N", &stopped);
  EXPECT_FALSE(stopped);
  out += m.Push("Dtail", &stopped);
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "abc");
}

TEST(StopMatcherTest, HoldsBackOnlyWhatCouldStartAStop) {
  StopMatcher m({"xyz"});
  bool stopped = false;
  EXPECT_EQ(m.Push("hello", &stopped), "hel");
  EXPECT_EQ(m.Push(" world", &stopped), "lo wor");
  EXPECT_EQ(m.Flush(), "ld");
}

TEST(StopMatcherTest, EarliestOfSeveralStopsWins) {
  StopMatcher m({"zz", "b"});
  bool stopped = false;
  EXPECT_EQ(m.Push("aazzb", &stopped), "aa");
  EXPECT_TRUE(stopped);
}

TEST(StopMatcherTest, NeverSplitsAMultiByteCharacter) {
  StopMatcher m({"ab"});  // holds back 1 byte
  bool stopped = false;
  // "é" is two bytes; holding back one byte must hold back the whole character.
  EXPECT_EQ(m.Push("x\xC3\xA9", &stopped), "x");
  EXPECT_EQ(m.Flush(), "\xC3\xA9");
}

}  // namespace
}  // namespace tandem::workers
