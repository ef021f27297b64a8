#include "gateway/relay/relay_writes.h"

#include "gtest/gtest.h"

namespace tandem::gateway {
namespace {

using Next = RelayWrites::Next;

TEST(RelayWritesTest, AnEndWithoutAWriteInFlightFinishesAtOnceAndOnce) {
  RelayWrites w;
  w.WriteStarted();
  EXPECT_EQ(w.WriteDone(true), Next::kResume);
  EXPECT_TRUE(w.UpstreamDone(grpc::Status::OK));
  const auto status = w.TakeFinish();
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(status->ok());
  EXPECT_FALSE(w.TakeFinish().has_value());
}

TEST(RelayWritesTest, AnEndDuringAWriteFinishesWhenTheWriteCompletes) {
  RelayWrites w;
  w.WriteStarted();
  EXPECT_FALSE(w.UpstreamDone(grpc::Status(grpc::StatusCode::DATA_LOSS, "cut")));
  EXPECT_EQ(w.WriteDone(true), Next::kFinish);
  const auto status = w.TakeFinish();
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->error_code(), grpc::StatusCode::DATA_LOSS);
}

TEST(RelayWritesTest, AClientThatStoppedReadingMakesASuccessCancelled) {
  RelayWrites w;
  w.WriteStarted();
  EXPECT_EQ(w.WriteDone(false), Next::kClientGone);
  EXPECT_TRUE(w.UpstreamDone(grpc::Status::OK));
  const auto status = w.TakeFinish();
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->error_code(), grpc::StatusCode::CANCELLED);
}

TEST(RelayWritesTest, AClientGoneKeepsTheUpstreamsErrorWhenThereIsOne) {
  RelayWrites w;
  w.WriteStarted();
  EXPECT_EQ(w.WriteDone(false), Next::kClientGone);
  EXPECT_TRUE(w.UpstreamDone(grpc::Status(grpc::StatusCode::UNAVAILABLE, "no worker")));
  EXPECT_EQ(w.TakeFinish()->error_code(), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace tandem::gateway
