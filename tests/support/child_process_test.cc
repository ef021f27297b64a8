// The test harness's own guarantee: a gateway or worker that crashes fails the test that ran it.
#include "tests/support/child_process.h"

#include <signal.h>
#include <sys/wait.h>

#include <thread>

#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"
#include "tests/support/temp_path.h"

namespace tandem::testing {
namespace {

std::unique_ptr<ChildProcess> Shell(const std::string& script) {
  auto p = ChildProcess::Start("/bin/sh", {"-c", script}, TempPath("sh.log"));
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : nullptr;
}

TEST(ChildProcessTest, AChildThatDiesOfASignalNobodySentFailsTheTest) {
  auto p = Shell("kill -SEGV $$");
  ASSERT_NE(p, nullptr);
  const int status = p->Wait(absl::Seconds(20));
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_NONFATAL_FAILURE(p.reset(), "child crashed");
}

TEST(ChildProcessTest, SignalsTheTestSentAndCleanExitsAreNotCrashes) {
  auto killed = Shell("exec sleep 60");
  ASSERT_NE(killed, nullptr);
  killed->Signal(SIGKILL);
  EXPECT_TRUE(WIFSIGNALED(killed->Wait(absl::Seconds(20))));
  killed.reset();  // a failure here fails this test

  auto clean = Shell("exit 0");
  ASSERT_NE(clean, nullptr);
  EXPECT_EQ(clean->Wait(absl::Seconds(20)), 0);
  clean.reset();

  // Never waited on: the destructor's own SIGTERM is not a crash either.
  auto running = Shell("exec sleep 60");
  ASSERT_NE(running, nullptr);
  running.reset();
}

TEST(ChildProcessTest, AChildOutlivesTheThreadThatStartedIt) {
  // The kernel's parent-death signal follows the thread that forked; a child started here and
  // forked on this short-lived thread would get SIGTERM as soon as the thread returned.
  // The thread waits for the child's first line, so the child has set its parent-death signal
  // (before exec) while the thread was still alive.
  std::unique_ptr<ChildProcess> p;
  std::thread([&] {
    p = Shell("echo up; sleep 1; exit 7");
    if (p != nullptr) {
      EXPECT_TRUE(p->WaitForLine("up", absl::Seconds(20)).ok());
    }
  }).join();
  ASSERT_NE(p, nullptr);
  const int status = p->Wait(absl::Seconds(20));
  ASSERT_TRUE(WIFEXITED(status)) << "died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 7);
}

}  // namespace
}  // namespace tandem::testing
