#include "router/hashed_classifier.h"

#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::router {
namespace {

using ::testing::HasSubstr;

HashedClassifier Toy() {
  std::vector<std::pair<std::string, int>> examples;
  for (int i = 0; i < 200; ++i) {
    examples.push_back({"please write a python function that sorts item " + std::to_string(i), 0});
    examples.push_back({"what time is it in city " + std::to_string(i), 1});
  }
  HashedClassifier::TrainOptions o;
  o.buckets = 1 << 12;
  return HashedClassifier::Train({"code", "chat"}, examples, o);
}

TEST(HashedClassifierTest, LearnsAndGeneralisesOnAToyProblem) {
  const HashedClassifier m = Toy();
  auto code = m.Predict("write a function in python for me");
  EXPECT_EQ(m.classes()[code.label], "code");
  EXPECT_GT(code.confidence, 0.5);
  EXPECT_EQ(m.classes()[m.Predict("what time is it now").label], "chat");
}

TEST(HashedClassifierTest, RoundTripsThroughBytesExactly) {
  const HashedClassifier m = Toy();
  auto back = HashedClassifier::FromBytes(m.ToBytes());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->classes(), m.classes());
  EXPECT_EQ(back->ToBytes(), m.ToBytes());
  EXPECT_EQ(back->Predict("sort a list in python").confidence,
            m.Predict("sort a list in python").confidence);
}

TEST(HashedClassifierTest, RejectsCorruptModels) {
  const std::string bytes = Toy().ToBytes();
  EXPECT_THAT(HashedClassifier::FromBytes("nonsense").status().message(), HasSubstr("bad magic"));
  EXPECT_THAT(HashedClassifier::FromBytes(bytes.substr(0, bytes.size() - 3)).status().message(),
              HasSubstr("bytes of weights"));
  std::string shape = bytes;
  shape[8] = shape[9] = shape[10] = shape[11] = 0;  // zero buckets
  EXPECT_THAT(HashedClassifier::FromBytes(shape).status().message(),
              HasSubstr("implausible shape"));
}

TEST(HashedClassifierTest, ShippedModelLoadsAndSeparatesTheSeedsClasses) {
  std::ifstream in(TANDEM_SOURCE_DIR "/router/classifier/model.tcls", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  auto m = HashedClassifier::FromBytes(ss.str());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->classes()[m->Predict("Write a Rust function that parses a config file").label],
            "accuracy_critical");
  EXPECT_EQ(m->classes()[m->Predict("set a timer for ten minutes").label], "latency_critical");
}

}  // namespace
}  // namespace tandem::router
