#include "common/tls.h"

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file.h"

namespace tandem {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const std::string& what) {
  // Far above any certificate chain or CA bundle; bounded so that a path such as /dev/zero is
  // refused rather than read without end.
  constexpr int64_t kMaxPemBytes = int64_t{16} << 20;
  auto text = ReadFileToString(path, kMaxPemBytes, "");
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", text.status().message()));
  }
  if (!absl::StrContains(*text, "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", path, " is not a PEM file"));
  }
  return text;
}

struct BioDeleter {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Deleter {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

std::unique_ptr<BIO, BioDeleter> MemBio(const std::string& text) {
  return std::unique_ptr<BIO, BioDeleter>(
      BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

unsigned RefreshSeconds(absl::Duration d) {
  return static_cast<unsigned>(std::max<int64_t>(1, absl::ToInt64Seconds(d)));
}

}  // namespace

int NoPassphrase(char*, int, int, void*) { return 0; }

absl::Status CheckTlsFiles(const TlsFiles& files, const std::string& what) {
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": a certificate needs its key and a key its certificate"));
  }
  if (!files.cert.empty()) {
    auto cert = ReadPem(files.cert, what);
    if (!cert.ok()) return cert.status();
    auto key = ReadPem(files.key, what);
    if (!key.ok()) return key.status();
    auto cert_bio = MemBio(*cert);
    std::unique_ptr<X509, X509Deleter> x509(
        PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
    if (x509 == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": ", files.cert, " holds no X.509 certificate"));
    }
    auto key_bio = MemBio(*key);
    std::unique_ptr<EVP_PKEY, KeyDeleter> pkey(
        PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassphrase, nullptr));
    if (pkey == nullptr) {
      ERR_clear_error();
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": ", files.key, " holds no private key (encrypted keys are not supported)"));
    }
    if (X509_check_private_key(x509.get(), pkey.get()) != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": the key in ", files.key, " does not belong to the certificate in ", files.cert));
    }
  }
  if (!files.ca.empty()) {
    auto ca = ReadPem(files.ca, what);
    if (!ca.ok()) return ca.status();
    auto bio = MemBio(*ca);
    std::unique_ptr<X509, X509Deleter> x509(
        PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (x509 == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": ", files.ca, " holds no CA certificate"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files, const std::string& what) {
  if (files.cert.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": a TLS server needs a certificate and key"));
  }
  if (absl::Status s = CheckTlsFiles(files, what); !s.ok()) return s;
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      files.key, files.cert, files.ca, RefreshSeconds(files.refresh));
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (!files.ca.empty()) {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  auto creds = grpc::experimental::TlsServerCredentials(options);
  if (creds == nullptr)
    return absl::InternalError(absl::StrCat(what, ": gRPC refused the TLS options"));
  return creds;
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsFiles& files, const std::string& what) {
  if (absl::Status s = CheckTlsFiles(files, what); !s.ok()) return s;
  grpc::experimental::TlsChannelCredentialsOptions options;
  if (!files.cert.empty() || !files.ca.empty()) {
    options.set_certificate_provider(
        std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
            files.key, files.cert, files.ca, RefreshSeconds(files.refresh)));
    if (!files.ca.empty()) options.watch_root_certs();
    if (!files.cert.empty()) options.watch_identity_key_cert_pairs();
  }
  auto creds = grpc::experimental::TlsCredentials(options);
  if (creds == nullptr)
    return absl::InternalError(absl::StrCat(what, ": gRPC refused the TLS options"));
  return creds;
}

}  // namespace tandem
