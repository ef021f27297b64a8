#include "common/json_text.h"

#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem {
namespace {

TEST(QuoteForJsonTest, EscapesQuotesBackslashesAndControlBytes) {
  EXPECT_EQ(QuoteForJson(""), "\"\"");
  EXPECT_EQ(QuoteForJson("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(QuoteForJson("line\nnext"), R"("line\nnext")");
  EXPECT_EQ(QuoteForJson(std::string("\t\x01\x1f", 3)), R"("\u0009\u0001\u001f")");
}

TEST(QuoteForJsonTest, KeepsUtf8AsItIs) { EXPECT_EQ(QuoteForJson("héllo ✓"), "\"héllo ✓\""); }

// Whatever the bytes, a JSON parser reads back exactly the text (valid UTF-8 in, same out).
TEST(QuoteForJsonTest, AJsonParserReadsBackTheText) {
  std::string every_ascii;
  for (int c = 1; c < 0x80; ++c) every_ascii.push_back(static_cast<char>(c));
  for (const std::string& text : {every_ascii, std::string("déjà vu \"quoted\"\r\n"),
                                  std::string("emoji 🙂 and \\ backslash")}) {
    const nlohmann::json parsed = nlohmann::json::parse(QuoteForJson(text));
    ASSERT_TRUE(parsed.is_string());
    EXPECT_EQ(parsed.get<std::string>(), text);
  }
}

}  // namespace
}  // namespace tandem
