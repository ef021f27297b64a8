#include "workers/upstream/sse_parser.h"

#include "gtest/gtest.h"

namespace tandem::workers::upstream {
namespace {

std::vector<SseParser::Event> ParseInPieces(const std::string& body, size_t piece) {
  SseParser p(1 << 20);
  std::vector<SseParser::Event> events;
  for (size_t i = 0; i < body.size(); i += piece) {
    EXPECT_TRUE(p.Feed(absl::string_view(body).substr(i, piece), &events).ok());
  }
  return events;
}

TEST(SseParserTest, EventsAreTheSameHoweverTheBytesAreSplit) {
  const std::string body =
      ": comment\r\nevent: delta\r\ndata: {\"a\":1}\r\n\r\ndata: line one\ndata: line two\n\n"
      "data:no space\r\rid: 7\ndata: [DONE]\n\n";
  for (size_t piece : {1, 2, 3, 7, 1000}) {
    auto events = ParseInPieces(body, piece);
    ASSERT_EQ(events.size(), 4u) << "piece " << piece;
    EXPECT_EQ(events[0].event, "delta");
    EXPECT_EQ(events[0].data, "{\"a\":1}");
    EXPECT_EQ(events[1].data, "line one\nline two");
    EXPECT_EQ(events[2].data, "no space");
    EXPECT_EQ(events[3].data, "[DONE]");
  }
}

TEST(SseParserTest, AnEventWithoutDataIsNoEventAndACutStreamIsPartial) {
  SseParser p(1 << 20);
  std::vector<SseParser::Event> events;
  ASSERT_TRUE(p.Feed("event: ping\n\ndata: {\"x\"", &events).ok());
  EXPECT_TRUE(events.empty());
  EXPECT_TRUE(p.HasPartial());
}

TEST(SseParserTest, ALineOrEventPastTheBoundIsRefused) {
  SseParser p(16);
  std::vector<SseParser::Event> events;
  EXPECT_EQ(p.Feed(std::string(40, 'x'), &events).code(), absl::StatusCode::kResourceExhausted);
  SseParser q(16);
  EXPECT_EQ(q.Feed("data: 0123456789\ndata: 0123456789\n", &events).code(),
            absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace tandem::workers::upstream
