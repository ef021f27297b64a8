#include "common/log_text.h"

#include "common/log_rate_limiter.h"
#include "common/utf8.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

TEST(QuoteForLogTest, EscapesEverythingALogLineCouldBeForgedWith) {
  EXPECT_EQ(QuoteForLog("plain"), "\"plain\"");
  EXPECT_EQ(QuoteForLog("a\nb\r\tc"), "\"a\\nb\\r\\tc\"");
  EXPECT_EQ(QuoteForLog("say \"hi\" \\ bye"), "\"say \\\"hi\\\" \\\\ bye\"");
  EXPECT_EQ(QuoteForLog("caf\xc3\xa9"), "\"caf\\xc3\\xa9\"");
  EXPECT_EQ(QuoteForLog(std::string("\0\x1b\x7f", 3)), "\"\\x00\\x1b\\x7f\"");
  EXPECT_EQ(QuoteForLog(""), "\"\"");
}

TEST(QuoteForLogTest, AnyInputGivesOneBoundedPrintableLine) {
  std::string every_byte;
  for (int c = 0; c < 256; ++c) every_byte.push_back(static_cast<char>(c));
  for (const std::string& in : {every_byte, std::string(4 << 20, '\n')}) {
    const std::string out = QuoteForLog(in, 64);
    EXPECT_TRUE(IsValidUtf8(out));
    EXPECT_LE(out.size(), 4 * 64 + 32u);
    for (const unsigned char c : out) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << int(c);
  }
  EXPECT_EQ(QuoteForLog("abcdef", 3), "\"abc...\" (6 bytes)");
}

TEST(IsPlainTokenTest, VisibleAsciiWithinTheLimit) {
  EXPECT_TRUE(IsPlainToken("req-1:/@~", 16));
  EXPECT_FALSE(IsPlainToken("", 16));
  EXPECT_FALSE(IsPlainToken("a b", 16));
  EXPECT_FALSE(IsPlainToken("caf\xc3\xa9", 16));
  EXPECT_FALSE(IsPlainToken("abc", 2));
}

TEST(LogRateLimiterTest, BurstThenRateAndSaysWhatItDropped) {
  LogRateLimiter limiter(/*per_second=*/2, /*burst=*/3);
  const auto t0 = std::chrono::steady_clock::now();
  int64_t suppressed = -1;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(limiter.Allow(t0, &suppressed));
    EXPECT_EQ(suppressed, 0);
  }
  EXPECT_FALSE(limiter.Allow(t0, &suppressed));
  EXPECT_FALSE(limiter.Allow(t0, &suppressed));
  // Half a second refills one line at 2 a second; it reports the two dropped.
  EXPECT_TRUE(limiter.Allow(t0 + std::chrono::milliseconds(500), &suppressed));
  EXPECT_EQ(suppressed, 2);
  EXPECT_FALSE(limiter.Allow(t0 + std::chrono::milliseconds(500), &suppressed));
}

TEST(LogRateLimiterTest, ZeroRateLogsEverything) {
  LogRateLimiter limiter(0, 0);
  int64_t suppressed = -1;
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(limiter.Allow(&suppressed));
  EXPECT_EQ(suppressed, 0);
}

}  // namespace
}  // namespace tandem
