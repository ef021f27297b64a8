#include "gateway/http_client.h"

#include <curl/curl.h>

#include <mutex>

#include "absl/strings/str_cat.h"

namespace tandem::gateway {
namespace {

// Bodies larger than this are refused: a /metrics page or query result is far smaller.
constexpr size_t kMaxBodyBytes = 16 << 20;

size_t Append(char* data, size_t size, size_t n, void* user) {
  auto* body = static_cast<std::string*>(user);
  if (body->size() + size * n > kMaxBodyBytes) return 0;  // aborts the transfer
  body->append(data, size * n);
  return size * n;
}

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

}  // namespace

CurlHttpClient::CurlHttpClient() {
  GlobalInit();
  curl_ = curl_easy_init();
}

CurlHttpClient::~CurlHttpClient() { curl_easy_cleanup(static_cast<CURL*>(curl_)); }

absl::StatusOr<std::string> CurlHttpClient::Get(const std::string& url, absl::Duration timeout) {
  CURL* c = static_cast<CURL*>(curl_);
  if (c == nullptr) return absl::InternalError("curl_easy_init failed");
  std::string body;
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &Append);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(absl::ToInt64Milliseconds(timeout)));
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(timeout)));
  // No signals: timeouts must not raise SIGALRM in a multi-threaded process.
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "");
  const CURLcode rc = curl_easy_perform(c);
  if (rc != CURLE_OK) {
    return absl::UnavailableError(absl::StrCat("GET ", url, ": ", curl_easy_strerror(rc)));
  }
  long code = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
  if (code != 200) {
    return absl::UnavailableError(
        absl::StrCat("GET ", url, ": HTTP ", code, ": ", body.substr(0, 200)));
  }
  return body;
}

std::string CurlHttpClient::Escape(const std::string& text) {
  GlobalInit();
  char* e = curl_easy_escape(nullptr, text.data(), static_cast<int>(text.size()));
  std::string out = e == nullptr ? std::string() : std::string(e);
  curl_free(e);
  return out;
}

}  // namespace tandem::gateway
