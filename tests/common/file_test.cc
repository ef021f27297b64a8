#include "common/file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/temp_path.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

TEST(ReadFileToStringTest, ReadsBytesAndSaysWhyNot) {
  std::string bytes(200000, 'x');  // larger than one read
  bytes[7] = '\0';
  const std::string path = testing::WriteTempFile("bytes.bin", bytes);
  auto read = ReadFileToString(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, bytes);

  auto empty = ReadFileToString(testing::WriteTempFile("empty", ""));
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(*empty, "");

  auto missing = ReadFileToString("/nonexistent/file");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(),
              HasSubstr("cannot read /nonexistent/file: No such file or directory"));

  const std::string dir = testing::TempPath("a_dir");
  ASSERT_TRUE(std::filesystem::create_directory(dir));
  auto directory = ReadFileToString(dir);
  EXPECT_EQ(directory.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(directory.status().message(), HasSubstr("Is a directory"));

  // A FIFO without a writer reads as empty at once (opening it blocking would wait for one).
  const std::string fifo = testing::TempPath("a_fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto from_fifo = ReadFileToString(fifo);
  ASSERT_TRUE(from_fifo.ok()) << from_fifo.status();
  EXPECT_EQ(*from_fifo, "");

  // A pipe with data and its writer closed (as --image=/dev/stdin from a shell pipe).
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  ASSERT_EQ(write(p[1], "piped", 5), 5);
  close(p[1]);
  auto from_pipe = ReadFileToString("/dev/fd/" + std::to_string(p[0]));
  close(p[0]);
  ASSERT_TRUE(from_pipe.ok()) << from_pipe.status();
  EXPECT_EQ(*from_pipe, "piped");

  auto device = ReadFileToString("/dev/null");
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_EQ(*device, "");
}

TEST(ReadFileToStringTest, BoundedReadStopsPastTheLimit) {
  const std::string exact = testing::WriteTempFile("exact.bin", std::string(100, 'x'));
  auto at_limit = ReadFileToString(exact, 100, "--max_test_bytes");
  ASSERT_TRUE(at_limit.ok()) << at_limit.status();
  EXPECT_EQ(at_limit->size(), 100u);

  // A regular file over the limit is refused from its size, unread.
  auto over = ReadFileToString(exact, 99, "--max_test_bytes");
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(over.status().message(), exact + ": larger than 99 bytes (--max_test_bytes)");
  auto unnamed = ReadFileToString(exact, 99, "");
  EXPECT_EQ(unnamed.status().message(), exact + ": larger than 99 bytes");

  // /dev/zero never ends: the read stops one byte past the limit (unbounded, it grew for good).
  auto zero = ReadFileToString("/dev/zero", 1 << 20, "--max_test_bytes");
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(zero.status().message(), HasSubstr("/dev/zero: larger than 1048576 bytes"));

  // So does a path that became a link to it.
  const std::string link = testing::TempPath("link_to_zero");
  ASSERT_EQ(symlink("/dev/zero", link.c_str()), 0);
  auto via_link = ReadFileToString(link, 4096, "--max_test_bytes");
  EXPECT_EQ(via_link.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(via_link.status().message(), link + ": larger than 4096 bytes (--max_test_bytes)");

  // Pipes have no size up front: counted as they are read.
  for (const auto& [bytes, ok] : {std::pair{size_t{64}, true}, std::pair{size_t{65}, false}}) {
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    const std::string data(bytes, 'p');
    ASSERT_EQ(write(p[1], data.data(), data.size()), static_cast<ssize_t>(data.size()));
    close(p[1]);
    auto piped = ReadFileToString("/dev/fd/" + std::to_string(p[0]), 64, "--max_test_bytes");
    close(p[0]);
    if (ok) {
      ASSERT_TRUE(piped.ok()) << piped.status();
      EXPECT_EQ(*piped, data);
    } else {
      EXPECT_EQ(piped.status().code(), absl::StatusCode::kResourceExhausted);
    }
  }

  // Errors other than the limit are the unbounded read's.
  auto missing = ReadFileToString("/nonexistent/file", 10, "--max_test_bytes");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  auto fifo_path = testing::TempPath("bounded_fifo");
  ASSERT_EQ(mkfifo(fifo_path.c_str(), 0600), 0);
  auto fifo = ReadFileToString(fifo_path, 10, "--max_test_bytes");
  ASSERT_TRUE(fifo.ok()) << fifo.status();
  EXPECT_EQ(*fifo, "");
}

}  // namespace
}  // namespace tandem
