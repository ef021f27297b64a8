#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/support/stack.h"

namespace tandem::testing {

// A certificate issued by a TestCa: PEM file paths.
struct TestCert {
  std::string cert;
  std::string key;
};

// A throwaway certificate authority made with the openssl command line (P-256 keys, valid for
// two days) in a fresh temp directory. For TLS tests only.
class TestCa {
 public:
  static absl::StatusOr<TestCa> Create(const std::string& name);

  // A leaf certificate for `common_name`, valid for TLS servers and clients, with subject
  // alternative names IP:127.0.0.1 and DNS:localhost.
  absl::StatusOr<TestCert> Issue(const std::string& common_name) const;

  // The CA certificate (PEM): what peers trust.
  const std::string& ca_cert() const { return cert_; }

 private:
  std::string dir_;
  std::string cert_;
  std::string key_;
};

// A TestCa named `name` into `*ca`, and a certificate from it for each of `common_names`, in
// order, into `*certs`; a fatal failure when openssl fails (call it in ASSERT_NO_FATAL_FAILURE).
void MakeTestPki(const std::string& name, const std::vector<std::string>& common_names, TestCa* ca,
                 std::vector<TestCert>* certs);

// What a TLS test suite starts once and its tests share. Its members stop in reverse order: the
// gateway, then the workers.
struct TlsSuite {
  TestCa ca;
  std::vector<Server> workers;
  Server gateway;
};

// Replaces `to` with `from` atomically (copy beside it, then rename), as an operator rotating a
// certificate should.
absl::Status ReplaceFileAtomically(const std::string& from, const std::string& to);

}  // namespace tandem::testing
