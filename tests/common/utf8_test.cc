#include "common/utf8.h"

#include "gtest/gtest.h"

namespace tandem {
namespace {

TEST(Utf8Test, AcceptsWellFormedText) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("caf\xC3\xA9"));               // é
  EXPECT_TRUE(IsValidUtf8("\xE6\x97\xA5\xE6\x9C\xAC"));  // 日本
  EXPECT_TRUE(IsValidUtf8("\xF0\x9F\x98\x80"));          // U+1F600
  EXPECT_TRUE(IsValidUtf8("\xF4\x8F\xBF\xBF"));          // U+10FFFF
}

TEST(Utf8Test, RejectsMalformedText) {
  EXPECT_FALSE(IsValidUtf8("\xC3\x28"));          // bad continuation
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xE0\x80\xAF"));      // overlong 3-byte
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));      // surrogate U+D800
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xE6\x97"));          // truncated
  EXPECT_FALSE(IsValidUtf8("\x80"));              // lone continuation
  EXPECT_FALSE(IsValidUtf8("\xFF"));
}

TEST(Utf8Test, CompletePrefixHoldsBackAnUnfinishedCharacter) {
  EXPECT_EQ(CompleteUtf8PrefixLength("abc"), 3u);
  EXPECT_EQ(CompleteUtf8PrefixLength("ab\xE6\x97"), 2u);
  EXPECT_EQ(CompleteUtf8PrefixLength("ab\xE6"), 2u);
  EXPECT_EQ(CompleteUtf8PrefixLength("ab\xE6\x97\xA5"), 5u);
  EXPECT_EQ(CompleteUtf8PrefixLength("\xF0\x9F\x98"), 0u);
  EXPECT_EQ(CompleteUtf8PrefixLength(""), 0u);
}

}  // namespace
}  // namespace tandem
