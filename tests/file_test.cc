#include "common/file.h"

#include <sys/stat.h>

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

  // A FIFO without a writer: refused at once (opening it blocking would wait for a writer).
  const std::string fifo = testing::TempPath("a_fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto from_fifo = ReadFileToString(fifo);
  EXPECT_EQ(from_fifo.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(from_fifo.status().message(), HasSubstr("a FIFO, not a file"));

  auto device = ReadFileToString("/dev/null");
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_EQ(*device, "");
}

}  // namespace
}  // namespace tandem
