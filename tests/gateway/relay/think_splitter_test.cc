#include "gateway/relay/think_splitter.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::gateway {
namespace {

struct Split {
  std::string reasoning;
  std::string content;
};

// Feeds `answer` in pieces of `step` bytes.
Split SplitAll(bool thinking, const std::string& answer, size_t step) {
  ThinkSplitter s(thinking);
  Split out;
  for (size_t i = 0; i < answer.size(); i += step) {
    s.Feed(answer.substr(i, step), &out.reasoning, &out.content);
  }
  s.Flush(&out.reasoning, &out.content);
  return out;
}

TEST(ThinkSplitterTest, SplitsAtTheCloseTagHoweverTheStreamIsCut) {
  const std::string answer = "Let me think. a < b </thin ok</think>\n\nThe answer is 42.";
  for (size_t step = 1; step <= answer.size(); ++step) {
    const Split s = SplitAll(true, answer, step);
    EXPECT_EQ(s.reasoning, "Let me think. a < b </thin ok") << step;
    EXPECT_EQ(s.content, "The answer is 42.") << step;
  }
}

TEST(ThinkSplitterTest, WithoutThinkingAllIsContentAsSent) {
  const Split s = SplitAll(false, "  indented </think> stays", 3);
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "  indented </think> stays");
}

TEST(ThinkSplitterTest, AnAnswerCutOffWhileThinkingIsAllReasoning) {
  const Split s = SplitAll(true, "still thinking </thi", 4);
  EXPECT_EQ(s.reasoning, "still thinking </thi");
  EXPECT_EQ(s.content, "");
}

}  // namespace
}  // namespace tandem::gateway
