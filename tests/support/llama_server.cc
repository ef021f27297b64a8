#include "tests/support/llama_server.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/file.h"
#include "common/sha256.h"
#include "tests/support/child_process.h"
#include "tests/support/temp_path.h"
#include "tests/support/test_paths.h"

namespace tandem::testing {
namespace {

bool IsFile(const std::string& path) { return access(path.c_str(), R_OK) == 0; }

// Runs make_tiny_gguf.py into `path` (through a partial file, renamed when complete).
absl::StatusOr<std::string> WriteTinyGguf(const std::string& dir, const std::string& model,
                                          const std::string& path) {
  const std::string partial = absl::StrCat(path, ".partial.", getpid());
  auto [code, output] = RunToExit(
      "/usr/bin/env",
      {"PYTHONPATH=" + dir + "/gguf-py", "/usr/bin/python3",
       tandem::testing::SourcePath("/tests/support/make_tiny_gguf.py"), dir, partial, model},
      absl::Seconds(120));
  if (code != 0 || std::rename(partial.c_str(), path.c_str()) != 0) {
    std::remove(partial.c_str());
    return absl::InternalError(absl::StrCat("make_tiny_gguf.py failed: ", output));
  }
  return path;
}

}  // namespace

absl::StatusOr<std::string> LlamaServerDir() {
  std::string dir;
  if (const char* d = std::getenv("TANDEM_LLAMA_SERVER_DIR"); d != nullptr && *d != '\0') {
    dir = d;
  } else {
    const char* cache = std::getenv("TANDEM_CACHE");
    const char* home = std::getenv("HOME");
    dir = absl::StrCat(cache != nullptr && *cache != '\0'
                           ? std::string(cache)
                           : absl::StrCat(home ? home : "", "/.cache/tandem"),
                       "/llama-server-node-llama-cpp-3.21.1");
  }
  if (!IsFile(dir + "/bin/llama-server") || !IsFile(dir + "/models/ggml-vocab-qwen35.gguf")) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no llama-server in ", dir, ": run scripts/build_llama_server.sh (scripts/test.sh does)"));
  }
  return dir;
}

absl::StatusOr<std::string> TinyGguf(const std::string& model) {
  static absl::Mutex mu(absl::kConstInit);
  absl::MutexLock l(&mu);
  absl::StatusOr<std::string> dir = LlamaServerDir();
  if (!dir.ok()) return dir.status();
  // Kept in the llama-server cache, named by the script's hash (its output is deterministic):
  // every test process after the first reuses it.
  absl::StatusOr<std::string> script =
      ReadFileToString(tandem::testing::SourcePath("/tests/support/make_tiny_gguf.py"));
  if (!script.ok()) return script.status();
  const std::string path =
      absl::StrCat(*dir, "/models/tiny-", model, "-", Sha256Hex(*script).substr(0, 16), ".gguf");
  if (IsFile(path)) return path;
  // One process writes it while the others wait: a suite's first cases start at once, and each
  // writing its own copy beside the others took 16-27 s a case under ASan instead of 3-7.
  const int lock = open(absl::StrCat(path, ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0 || flock(lock, LOCK_EX) != 0) {
    if (lock >= 0) close(lock);
    return absl::InternalError(absl::StrCat("cannot lock ", path, ".lock"));
  }
  absl::StatusOr<std::string> written = IsFile(path) ? path : WriteTinyGguf(*dir, model, path);
  close(lock);
  return written;
}

absl::StatusOr<Server> StartLlamaServer(const std::string& model, int port,
                                        const std::vector<std::string>& extra_args) {
  absl::StatusOr<std::string> dir = LlamaServerDir();
  if (!dir.ok()) return dir.status();
  absl::StatusOr<std::string> gguf = TinyGguf(model);
  if (!gguf.ok()) return gguf.status();
  // Everything llama-server prints goes to the log file: nobody drains a pipe for it.
  std::vector<std::string> args = {"-c",
                                   "exec \"$0\" \"$@\" 1>&2",
                                   *dir + "/bin/llama-server",
                                   "-m",
                                   *gguf,
                                   "--host",
                                   "127.0.0.1",
                                   "--port",
                                   absl::StrCat(port),
                                   "--metrics",
                                   "--jinja",
                                   "-c",
                                   "16384",
                                   "-np",
                                   "4",
                                   "-t",
                                   "1",
                                   "--alias",
                                   "tiny-" + model};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  auto process = ChildProcess::Start("/bin/sh", args, TempPath("llama_server_" + model + ".log"));
  if (!process.ok()) return process.status();
  std::string address;
  const bool listening = WaitUntil(
      [&] {
        const std::string log = (*process)->ReadLog();
        const size_t at = log.find("listening on http://");
        if (at == std::string::npos) return false;
        const size_t start = at + std::string("listening on http://").size();
        address = log.substr(start, log.find_first_of("\r\n", start) - start);
        return true;
      },
      absl::Seconds(30));
  if (!listening) {
    return absl::DeadlineExceededError(
        absl::StrCat("llama-server did not listen: ", (*process)->ReadLog()));
  }
  Server s;
  s.http_address = address;
  s.process = std::move(*process);
  return s;
}

std::vector<std::string> UpstreamWorkerFlags(const Server& llama,
                                             const std::vector<std::string>& extra) {
  std::vector<std::string> flags = {"--engine=upstream", "--upstream_profile=llamacpp",
                                    "--upstream_url=http://" + llama.http_address,
                                    "--upstream_health_interval=100ms",
                                    "--upstream_metrics_interval=100ms"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

}  // namespace tandem::testing
