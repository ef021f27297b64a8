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

}  // namespace
}  // namespace tandem
