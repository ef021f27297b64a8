#include "tests/support/temp_path.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tandem::testing {
namespace {

class ProcessTempDir {
 public:
  ProcessTempDir() {
    // Constructs gtest's UnitTest (a function-local static) first if nothing has yet, so it is
    // destroyed after this object and the destructor below can still ask it.
    ::testing::UnitTest::GetInstance();
    std::string tmpl = absl::StrCat(::testing::TempDir(), "/tandem_", getpid(), "_XXXXXX");
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::perror(("mkdtemp " + tmpl).c_str());
      std::abort();
    }
    path_ = tmpl;
  }
  ~ProcessTempDir() {
    if (!::testing::UnitTest::GetInstance()->Passed()) return;
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

std::string TempPath(const std::string& name) {
  static ProcessTempDir dir;
  static std::atomic<int> counter{0};
  return absl::StrCat(dir.path(), "/", counter++, "_", name);
}

std::string WriteTempFile(const std::string& name, const std::string& text) {
  const std::string path = TempPath(name);
  std::ofstream(path) << text;
  return path;
}

void ReplaceFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".new";
  std::ofstream(tmp) << text;
  ASSERT_EQ(std::rename(tmp.c_str(), path.c_str()), 0) << path;
}

}  // namespace tandem::testing
