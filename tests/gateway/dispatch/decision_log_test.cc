#include "gateway/dispatch/decision_log.h"

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "tests/support/temp_path.h"

namespace tandem::gateway {
namespace {

using ::testing::HasSubstr;

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

class DecisionLogTest : public ::testing::Test {
 protected:
  prometheus::Registry registry_;
  prometheus::Counter& written_ =
      prometheus::BuildCounter().Name("written").Register(registry_).Add({});
  prometheus::Counter& dropped_ =
      prometheus::BuildCounter().Name("dropped").Register(registry_).Add({});
};

TEST_F(DecisionLogTest, EveryRecordIsOneJsonLineOnceTheLogCloses) {
  const std::string path = testing::TempPath("decisions.jsonl");
  {
    auto log = DecisionLog::Open(path, 100, &written_, &dropped_);
    ASSERT_TRUE(log.ok()) << log.status();
    for (int i = 0; i < 20; ++i) {
      tandem::v1::DecisionRecord r;
      r.set_request_id("r" + std::to_string(i));
      r.set_model(i % 2 == 0 ? "qwen" : "nemotron");
      (*log)->Record(std::move(r));
    }
  }  // the destructor writes what is pending
  const std::vector<std::string> lines = Lines(path);
  ASSERT_EQ(lines.size(), 20u);
  for (int i = 0; i < 20; ++i) {
    tandem::v1::DecisionRecord r;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(lines[i], &r).ok()) << lines[i];
    EXPECT_EQ(r.request_id(), "r" + std::to_string(i));
  }
  EXPECT_THAT(lines[0], HasSubstr("\"request_id\""));  // proto field names, as replay reads
  EXPECT_EQ(written_.Value(), 20);
  EXPECT_EQ(dropped_.Value(), 0);
}

TEST_F(DecisionLogTest, ReopeningAppends) {
  const std::string path = testing::TempPath("appended.jsonl");
  for (int run = 0; run < 2; ++run) {
    auto log = DecisionLog::Open(path, 10, &written_, &dropped_);
    ASSERT_TRUE(log.ok());
    (*log)->Record(tandem::v1::DecisionRecord());
  }
  EXPECT_EQ(Lines(path).size(), 2u);
}

TEST_F(DecisionLogTest, AnUnwritablePathIsAClearError) {
  auto log = DecisionLog::Open("/nonexistent-dir/decisions.jsonl", 10, &written_, &dropped_);
  EXPECT_EQ(log.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(log.status().message()), HasSubstr("--decision_log="));
}

// Whatever the writer's pace, every record is either written or counted as dropped.
TEST_F(DecisionLogTest, NothingIsLostSilentlyWhenTheWriterFallsBehind) {
  const std::string path = testing::TempPath("bounded.jsonl");
  constexpr int kRecords = 5000;
  {
    auto log = DecisionLog::Open(path, 4, &written_, &dropped_);
    ASSERT_TRUE(log.ok());
    for (int i = 0; i < kRecords; ++i) (*log)->Record(tandem::v1::DecisionRecord());
  }
  EXPECT_EQ(written_.Value() + dropped_.Value(), kRecords);
  EXPECT_EQ(static_cast<double>(Lines(path).size()), written_.Value());
}

}  // namespace
}  // namespace tandem::gateway
