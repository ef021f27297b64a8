#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/tls.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace tandem {

// An OpenSSL server context for the sockets Tandem serves itself (the /metrics port; gRPC has its
// own). Built from TlsFiles: the certificate chain and key are required, and with files.ca every
// client must present a certificate that CA signed. TLS 1.2 or newer. The files are checked
// again at most every files.refresh and the context is rebuilt when one of them changed, so a
// rotated certificate applies to new connections without a restart; a rebuild that fails (a
// half-rotated pair) keeps the previous context and is logged once. Thread-safe.
class TlsServerContext {
 public:
  // `what` names the flags in errors. INVALID_ARGUMENT when the files do not make a context.
  static absl::StatusOr<std::unique_ptr<TlsServerContext>> Create(const TlsFiles& files,
                                                                  const std::string& what);

  // The context for a new connection (SSL_new takes its own reference, so the caller need not
  // keep this alive past SSL_new).
  std::shared_ptr<SSL_CTX> Current() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // What identifies a version of a file: a rename gives a new inode, an edit in place a new mtime.
  struct FileStamp {
    int64_t mtime_ns = 0;
    ino_t inode = 0;
    off_t size = 0;
    bool operator==(const FileStamp&) const = default;
  };
  using Stamp = std::vector<FileStamp>;  // one per file, in the order cert, key, ca
  TlsServerContext(TlsFiles files, std::string what, std::shared_ptr<SSL_CTX> ctx, Stamp stamp);
  Stamp StampFiles() const;

  const TlsFiles files_;
  const std::string what_;
  absl::Mutex mu_;
  std::shared_ptr<SSL_CTX> ctx_ ABSL_GUARDED_BY(mu_);
  Stamp stamp_ ABSL_GUARDED_BY(mu_);         // the files ctx_ came from
  Stamp failed_stamp_ ABSL_GUARDED_BY(mu_);  // the last rebuild that failed
  std::chrono::steady_clock::time_point next_check_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem
