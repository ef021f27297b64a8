#include "router/hashed_classifier.h"

#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/classifier/calibration.h"
#include "tests/support/test_paths.h"

namespace tandem::router {
namespace {

using ::testing::HasSubstr;

HashedClassifier Toy(int format = 3, double dropout = 0, uint64_t seed = 1) {
  std::vector<std::pair<std::string, int>> examples;
  for (int i = 0; i < 200; ++i) {
    examples.push_back({"please write a python function that sorts item " + std::to_string(i), 0});
    examples.push_back({"what time is it in city " + std::to_string(i), 1});
  }
  HashedClassifier::TrainOptions o;
  o.buckets = 1 << 12;
  o.format = format;
  o.dropout = dropout;
  o.seed = seed;
  return HashedClassifier::Train({"code", "chat"}, examples, o);
}

// `words` words of filler.
std::string Filler(const std::string& word, int words) {
  std::string s;
  for (int i = 0; i < words; ++i) s += word + " ";
  return s;
}

TEST(HashedClassifierTest, LearnsAndGeneralisesOnAToyProblem) {
  const HashedClassifier m = Toy();
  auto code = m.Predict("write a function in python for me");
  EXPECT_EQ(m.classes()[code.label], "code");
  EXPECT_GT(code.confidence, 0.5);
  EXPECT_EQ(m.classes()[m.Predict("what time is it now").label], "chat");
}

// Feature dropout (a measuring option of tandem-train-classifier) still learns, and a seed still
// decides the model: the same seed gives the same bytes.
TEST(HashedClassifierTest, FeatureDropoutLearnsAndTheSeedDecidesTheModel) {
  const HashedClassifier m = Toy(3, 0.5);
  EXPECT_EQ(m.classes()[m.Predict("write a function in python for me").label], "code");
  EXPECT_EQ(m.classes()[m.Predict("what time is it now").label], "chat");
  EXPECT_EQ(Toy(3, 0.5).ToBytes(), m.ToBytes());
  EXPECT_NE(Toy(3, 0.5, 2).ToBytes(), m.ToBytes());
}

// The same text under both labels, one copy weighed more: the model follows the weight; equal
// weights give the unweighted model.
TEST(HashedClassifierTest, ExampleWeightsDecideBetweenConflictingLabels) {
  std::vector<std::pair<std::string, int>> examples;
  for (int i = 0; i < 100; ++i) {
    examples.push_back({"book a table for two " + std::to_string(i), 0});
    examples.push_back({"book a table for two " + std::to_string(i), 1});
  }
  HashedClassifier::TrainOptions o;
  o.buckets = 1 << 12;
  for (int heavy : {0, 1}) {
    std::vector<double> weights(examples.size());
    for (size_t i = 0; i < examples.size(); ++i) {
      weights[i] = examples[i].second == heavy ? 1.8 : 0.2;
    }
    const HashedClassifier m = HashedClassifier::Train({"a", "b"}, examples, weights, o);
    const auto p = m.Predict("book a table for two");
    EXPECT_EQ(p.label, heavy);
    EXPECT_GT(p.confidence, 0.7);
  }
  const std::vector<double> ones(examples.size(), 1.0);
  EXPECT_EQ(HashedClassifier::Train({"a", "b"}, examples, ones, o).ToBytes(),
            HashedClassifier::Train({"a", "b"}, examples, o).ToBytes());
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

TEST(HashedClassifierTest, EveryFormatRoundTripsAndKeepsItsFeatures) {
  for (int format : {1, 2, 3}) {
    const HashedClassifier m = Toy(format);
    const std::string bytes = m.ToBytes();
    EXPECT_EQ(bytes.substr(0, 8), "TNDMCLS" + std::to_string(format));
    auto back = HashedClassifier::FromBytes(bytes);
    ASSERT_TRUE(back.ok()) << back.status();
    const std::string text = "please sort this for me?\n" + Filler("item", 100) + "thanks";
    EXPECT_EQ(back->Predict(text).confidence, m.Predict(text).confidence) << format;
  }
}

// Format 3's word classes carry what one word teaches to the other words of its class: trained
// on "python" only as code, a text with "mysql" in the same frame leans to code more than one with
// a word of no class, while format 2 tells them apart by n-grams alone.
TEST(HashedClassifierTest, FormatThreeCarriesAWordsClassToWordsNeverSeen) {
  std::vector<std::pair<std::string, int>> examples;
  for (int i = 0; i < 200; ++i) {
    const std::string n = std::to_string(i);
    examples.push_back({"python " + n, 0});
    examples.push_back({"zebra " + n, 1});
  }
  HashedClassifier::TrainOptions o;
  o.buckets = 1 << 12;
  const HashedClassifier m = HashedClassifier::Train({"code", "chat"}, examples, o);
  const auto sql = m.Predict("mysql 7");
  const auto none = m.Predict("ohqtw 7");
  EXPECT_EQ(sql.label, 0);
  EXPECT_GT(sql.label == 0 ? sql.confidence : 1 - sql.confidence,
            none.label == 0 ? none.confidence : 1 - none.confidence);
}

// Format 2 reads the n-grams of the first and last 24 words only: the middle of a long prompt is
// material, and changing it (not its length or shape) changes nothing; the ends change the answer.
TEST(HashedClassifierTest, FormatTwoReadsTheFrameOfALongText) {
  const HashedClassifier m = Toy();
  const std::string head = "please write a python function that sorts ";
  const std::string tail = " thanks";
  auto text = [&](const std::string& middle) {
    return head + Filler("apple", 30) + Filler(middle, 10) + Filler("apple", 30) + tail;
  };
  const double a = m.Predict(text("pear")).confidence;
  const double b = m.Predict(text("time")).confidence;
  EXPECT_EQ(a, b);
  const double c = m.Predict("what time is it in " + Filler("apple", 60) + tail).confidence;
  EXPECT_NE(a, c);
  // Format 1 reads every word.
  const HashedClassifier old = Toy(1);
  EXPECT_NE(old.Predict(text("pear")).confidence, old.Predict(text("time")).confidence);
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
  std::ifstream in(tandem::testing::SourcePath("/router/classifier/model.tcls"), std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  auto m = HashedClassifier::FromBytes(ss.str());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->classes()[m->Predict("Write a Rust function that parses a config file").label],
            "accuracy_critical");
  EXPECT_EQ(m->classes()[m->Predict("set a timer for ten minutes").label], "latency_critical");
}

// Four predictions, two classes: bins over [0.5, 1] of width 0.25.
//   [0.50, 0.75): 0.6 right, 0.7 wrong -> mean confidence 0.65, accuracy 0.5, gap 0.15
//   [0.75, 1.00]: 0.9 right, 1.0 right -> mean confidence 0.95, accuracy 1.0, gap 0.05
// ECE = (2 * 0.15 + 2 * 0.05) / 4 = 0.1.
TEST(CalibrationTest, ReliabilityBinsAndExpectedCalibrationErrorByHand) {
  const std::vector<classifier::Scored> scored = {
      {0, 0, 0.6}, {1, 0, 0.7}, {1, 1, 0.9}, {0, 0, 1.0}};
  const auto bins = classifier::Reliability(scored, 2, 2);
  ASSERT_EQ(bins.size(), 2u);
  EXPECT_DOUBLE_EQ(bins[0].lo, 0.5);
  EXPECT_DOUBLE_EQ(bins[1].hi, 1.0);
  EXPECT_EQ(bins[0].count, 2);
  EXPECT_NEAR(bins[0].mean_confidence, 0.65, 1e-12);
  EXPECT_NEAR(bins[0].accuracy, 0.5, 1e-12);
  EXPECT_EQ(bins[1].count, 2);  // 1.0 falls in the last bin, not past it
  EXPECT_NEAR(bins[1].accuracy, 1.0, 1e-12);
  EXPECT_NEAR(classifier::ExpectedCalibrationError(bins), 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(classifier::ExpectedCalibrationError({}), 0);
}

TEST(CalibrationTest, RoutedAccuracySendsUnsureAnswersToTheDefaultClass) {
  // Class 1 predicted at 0.6 (right) and 0.95 (right); class 0 at 0.55 (wrong: truly 1).
  const std::vector<classifier::Scored> scored = {{1, 1, 0.6}, {1, 1, 0.95}, {1, 0, 0.55}};
  // At 0.7 with default class 0: only the 0.95 answer stays class 1.
  const auto routed = classifier::RoutedAccuracy(scored, 2, 0.7, 0);
  EXPECT_NEAR(routed[1], 1.0 / 3, 1e-12);
  EXPECT_DOUBLE_EQ(routed[0], 0);  // no true class-0 examples
}

TEST(CalibrationTest, MinConfidenceIsTheLowestThresholdMeetingTheRule) {
  std::vector<classifier::Scored> scored;
  // 0.55: half right; 0.80 and above: all right.
  for (int i = 0; i < 10; ++i) scored.push_back({i % 2, 0, 0.55});
  for (int i = 0; i < 90; ++i) scored.push_back({1, 1, 0.8 + 0.001 * i});
  // Pooled rule alone: at 0.50, 95 of 100 right (< 97%); from 0.56 everything is right.
  auto choice = classifier::RecommendMinConfidence(scored, 2, 0.97);
  ASSERT_TRUE(choice.found);
  EXPECT_DOUBLE_EQ(choice.threshold, 0.56);
  EXPECT_DOUBLE_EQ(choice.coverage, 0.9);
  // Below 97% everywhere: nothing found.
  EXPECT_FALSE(classifier::RecommendMinConfidence({{0, 1, 0.99}}, 2, 0.97).found);
  // The band rule. Class 1 only: 90 right at 0.9, and 3 right and 2 wrong at 0.6. Pooled, 93
  // of 95 (97.9%) are right from 0.50 on, but the least sure trusted answers (0.60-0.65) are
  // 60% right: with a 90% band target the threshold rises past them, to 0.61.
  std::vector<classifier::Scored> banded;
  for (int i = 0; i < 90; ++i) banded.push_back({1, 1, 0.9});
  for (int i = 0; i < 5; ++i) banded.push_back({i < 3 ? 1 : 0, 1, 0.6});
  EXPECT_DOUBLE_EQ(classifier::RecommendMinConfidence(banded, 2, 0.97).threshold, 0.5);
  choice = classifier::RecommendMinConfidence(banded, 2, 0.97, 0.9);
  ASSERT_TRUE(choice.found);
  EXPECT_DOUBLE_EQ(choice.threshold, 0.61);
  EXPECT_NEAR(choice.coverage, 90.0 / 95, 1e-12);
}

}  // namespace
}  // namespace tandem::router
