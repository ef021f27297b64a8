#include "common/json_depth.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Nested(int levels, const std::string& open, const std::string& leaf,
                   const std::string& close) {
  std::string out;
  for (int i = 0; i < levels; ++i) out += open;
  out += leaf;
  for (int i = 0; i < levels; ++i) out += close;
  return out;
}

TEST(JsonNestingDepthTest, CountsArraysAndObjects) {
  EXPECT_EQ(JsonNestingDepth(""), 0);
  EXPECT_EQ(JsonNestingDepth("1"), 0);
  EXPECT_EQ(JsonNestingDepth("{}"), 1);
  EXPECT_EQ(JsonNestingDepth(R"({"a":[1,{"b":[]}],"c":{}})"), 4);
  EXPECT_EQ(JsonNestingDepth(Nested(1000, "[", "", "]")), 1000);
  // Unbalanced text counts what it opens; stray closers do not go below zero.
  EXPECT_EQ(JsonNestingDepth("]]]]{{"), 2);
}

TEST(JsonNestingDepthTest, BracketsInStringsDoNotCount) {
  EXPECT_EQ(JsonNestingDepth(R"({"a":"[[[{{{"})"), 1);
  EXPECT_EQ(JsonNestingDepth(R"(["\"[[[", "\\", [2]])"), 2);
  EXPECT_EQ(JsonNestingDepth(R"({"[[[\"":{"k\\":[]}})"), 3);
}

TEST(CheckJsonDepthTest, TheLimitItselfPasses) {
  for (const int limit : {1, 2, 64}) {
    EXPECT_TRUE(CheckJsonDepth(Nested(limit, R"({"a":)", "1", "}"), limit, "f").ok()) << limit;
    const absl::Status over = CheckJsonDepth(Nested(limit + 1, "[", "", "]"), limit, "f");
    EXPECT_EQ(over.code(), absl::StatusCode::kInvalidArgument) << limit;
  }
}

TEST(CheckJsonDepthTest, NamesTheFieldTheLimitAndThePath) {
  const std::string schema = R"({"type":"object","properties":{"p":)" +
                             Nested(100, R"({"a":)", "1", "}") + "}}";
  const absl::Status s = CheckJsonDepth(schema, 64, "tools[0].parameters_json");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              StartsWith("tools[0].parameters_json: JSON nested deeper than 64 levels "
                         "(--max_json_depth) at properties.p.a.a.a.a.a.a..."));
}

TEST(CheckJsonDepthTest, ABodyIsNamedByItsPath) {
  const std::string body = R"({"model":"auto","tools":[{"type":"function"},{"x":)" +
                           Nested(100, "[", "", "]") + "}]}";
  const absl::Status s = CheckJsonDepth(body, 10, "");
  EXPECT_THAT(std::string(s.message()),
              StartsWith("tools[1].x[0][0][0][0][0]...: JSON nested deeper than 10 levels"));
  // Keys that are not plain names are quoted; array indices follow the commas.
  const absl::Status odd = CheckJsonDepth(R"({"a b":[0, 1, [[]]]})", 3, "");
  EXPECT_THAT(std::string(odd.message()), StartsWith(R"(["a b"][2][0]: JSON nested deeper)"));
}

TEST(CheckJsonDepthTest, ScansAMegabyteBombWithoutRecursing) {
  const std::string bomb = Nested(200000, R"({"a":)", "1", "}");  // 1.2 MB
  EXPECT_FALSE(CheckJsonDepth(bomb, 64, "f").ok());
  EXPECT_EQ(JsonNestingDepth(bomb), 200000);
  EXPECT_THAT(std::string(CheckJsonDepth(bomb, kMaxJsonDepthCeiling, "f").message()),
              HasSubstr("deeper than 1000 levels"));
}

}  // namespace
}  // namespace tandem
