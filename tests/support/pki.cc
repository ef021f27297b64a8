#include "tests/support/pki.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "gtest/gtest.h"
#include "tests/support/stack.h"

namespace tandem::testing {
namespace {

absl::Status Run(const std::string& cmd, const std::string& log) {
  const std::string full = absl::StrCat(cmd, " >>", log, " 2>&1");
  if (std::system(full.c_str()) != 0) {
    auto text = ReadFileToString(log);
    return absl::InternalError(absl::StrCat("failed: ", cmd, "\n", text.ok() ? *text : ""));
  }
  return absl::OkStatus();
}

}  // namespace

void MakeTestPki(const std::string& name, const std::vector<std::string>& common_names, TestCa* ca,
                 std::vector<TestCert>* certs) {
  auto made = TestCa::Create(name);
  ASSERT_TRUE(made.ok()) << made.status();
  *ca = std::move(*made);
  certs->clear();
  for (const std::string& common_name : common_names) {
    auto cert = ca->Issue(common_name);
    ASSERT_TRUE(cert.ok()) << cert.status();
    certs->push_back(*cert);
  }
}

absl::StatusOr<TestCa> TestCa::Create(const std::string& name) {
  TestCa ca;
  ca.dir_ = TempPath("pki_" + name);
  if (mkdir(ca.dir_.c_str(), 0700) != 0) return absl::InternalError("mkdir " + ca.dir_);
  ca.cert_ = ca.dir_ + "/ca.crt";
  ca.key_ = ca.dir_ + "/ca.key";
  absl::Status s =
      Run(absl::StrCat("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
                       "-days 2 -subj '/CN=Tandem test CA ",
                       name,
                       "' -addext basicConstraints=critical,CA:TRUE -addext "
                       "keyUsage=critical,keyCertSign,cRLSign -keyout ",
                       ca.key_, " -out ", ca.cert_),
          ca.dir_ + "/openssl.log");
  if (!s.ok()) return s;
  return ca;
}

absl::StatusOr<TestCert> TestCa::Issue(const std::string& common_name) const {
  TestCert out;
  const std::string base = absl::StrCat(dir_, "/", common_name);
  out.cert = base + ".crt";
  out.key = base + ".key";
  const std::string ext = base + ".ext";
  std::ofstream(ext) << "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                     << "extendedKeyUsage=serverAuth,clientAuth\n"
                     << "basicConstraints=CA:FALSE\n";
  const std::string log = dir_ + "/openssl.log";
  absl::Status s =
      Run(absl::StrCat("openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "
                       "'/CN=",
                       common_name, "' -keyout ", out.key, " -out ", base, ".csr"),
          log);
  if (!s.ok()) return s;
  s = Run(absl::StrCat("openssl x509 -req -days 2 -in ", base, ".csr -CA ", cert_, " -CAkey ", key_,
                       " -CAcreateserial -extfile ", ext, " -out ", out.cert),
          log);
  if (!s.ok()) return s;
  return out;
}

absl::Status ReplaceFileAtomically(const std::string& from, const std::string& to) {
  auto text = ReadFileToString(from);
  if (!text.ok()) return text.status();
  const std::string tmp = to + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out << *text;
    if (!out) return absl::InternalError("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), to.c_str()) != 0) return absl::InternalError("rename to " + to);
  return absl::OkStatus();
}

}  // namespace tandem::testing
