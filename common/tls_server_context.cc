#include "common/tls_server_context.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/stat.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"

namespace tandem {
namespace {

// OpenSSL's reason for the last failure, and clears its error queue (which is per thread).
std::string OpenSslError() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

absl::StatusOr<std::shared_ptr<SSL_CTX>> Build(const TlsFiles& files, const std::string& what) {
  // Checks the files the way the gRPC port does first, for the same clear messages.
  if (absl::Status s = CheckTlsFiles(files, what); !s.ok()) return s;
  std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(TLS_server_method()), SSL_CTX_free);
  if (ctx == nullptr) return absl::InternalError(absl::StrCat(what, ": ", OpenSslError()));
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_default_passwd_cb(ctx.get(), NoPassphrase);
  // Short-lived scrape connections: no session cache to bound or to leak between clients.
  SSL_CTX_set_session_cache_mode(ctx.get(), SSL_SESS_CACHE_OFF);
  SSL_CTX_set_options(ctx.get(), SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_num_tickets(ctx.get(), 0);  // TLS 1.3 sends tickets after the handshake otherwise
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), files.cert.c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx.get(), files.key.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx.get()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": cannot use ", files.cert, " and ", files.key, ": ", OpenSslError()));
  }
  if (!files.ca.empty()) {
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(files.ca.c_str());
    if (names == nullptr ||
        SSL_CTX_load_verify_locations(ctx.get(), files.ca.c_str(), nullptr) != 1) {
      if (names != nullptr) sk_X509_NAME_pop_free(names, X509_NAME_free);
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": cannot use ", files.ca, ": ", OpenSslError()));
    }
    SSL_CTX_set_client_CA_list(ctx.get(), names);  // takes ownership
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return ctx;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TlsServerContext>> TlsServerContext::Create(
    const TlsFiles& files, const std::string& what) {
  if (files.cert.empty() || files.key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": a TLS server needs a certificate and key"));
  }
  // Stamped before reading, so an edit during the read is seen as a change at the next check.
  std::unique_ptr<TlsServerContext> out(new TlsServerContext(files, what, nullptr, {}));
  Stamp stamp = out->StampFiles();
  auto ctx = Build(files, what);
  if (!ctx.ok()) return ctx.status();
  {
    absl::MutexLock l(&out->mu_);  // not shared yet; the lock is for the analysis
    out->ctx_ = std::move(*ctx);
    out->stamp_ = std::move(stamp);
  }
  return out;
}

TlsServerContext::TlsServerContext(TlsFiles files, std::string what, std::shared_ptr<SSL_CTX> ctx,
                                   Stamp stamp)
    : files_(std::move(files)),
      what_(std::move(what)),
      ctx_(std::move(ctx)),
      stamp_(std::move(stamp)),
      next_check_(std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(files_.refresh)) {}

TlsServerContext::Stamp TlsServerContext::StampFiles() const {
  Stamp out;
  for (const std::string* path : {&files_.cert, &files_.key, &files_.ca}) {
    FileStamp s;
    struct stat st;
    if (!path->empty() && ::stat(path->c_str(), &st) == 0) {
      s.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
      s.inode = st.st_ino;
      s.size = st.st_size;
    }
    out.push_back(s);
  }
  return out;
}

std::shared_ptr<SSL_CTX> TlsServerContext::Current() {
  absl::MutexLock l(&mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now < next_check_) return ctx_;
  next_check_ = now + absl::ToChronoNanoseconds(files_.refresh);
  Stamp stamp = StampFiles();
  if (stamp == stamp_ || stamp == failed_stamp_) return ctx_;
  auto ctx = Build(files_, what_);
  if (!ctx.ok()) {
    failed_stamp_ = std::move(stamp);
    spdlog::warn("{}; still serving the previous certificate", std::string(ctx.status().message()));
    return ctx_;
  }
  spdlog::info("{}: reloaded the changed TLS files", what_);
  ctx_ = std::move(*ctx);
  stamp_ = std::move(stamp);
  failed_stamp_.clear();
  return ctx_;
}

}  // namespace tandem
