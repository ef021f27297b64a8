#include "common/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <memory>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tandem {
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

CurlHttpClient::CurlHttpClient(TlsFiles tls, std::string server_name,
                               std::vector<std::string> headers)
    : tls_(std::move(tls)), server_name_(std::move(server_name)), headers_(std::move(headers)) {
  GlobalInit();
  curl_ = curl_easy_init();
}

CurlHttpClient::~CurlHttpClient() { curl_easy_cleanup(static_cast<CURL*>(curl_)); }

absl::StatusOr<std::string> CurlHttpClient::Get(const std::string& url, absl::Duration timeout) {
  return Perform(url, nullptr, timeout);
}

absl::StatusOr<std::string> CurlHttpClient::PostJson(const std::string& url,
                                                     const std::string& json,
                                                     absl::Duration timeout) {
  return Perform(url, &json, timeout);
}

absl::StatusOr<std::string> CurlHttpClient::Perform(const std::string& url, const std::string* json,
                                                    absl::Duration timeout) {
  const char* method = json == nullptr ? "GET" : "POST";
  CURL* c = static_cast<CURL*>(curl_);
  if (c == nullptr) return absl::InternalError("curl_easy_init failed");
  std::string body;
  std::string target = url;
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> connect_to(nullptr,
                                                                         &curl_slist_free_all);
  if (absl::StartsWith(url, "https://")) {
    if (!tls_.ca.empty()) {
      // Only these roots: not also the system's directory of public CAs.
      curl_easy_setopt(c, CURLOPT_CAINFO, tls_.ca.c_str());
      curl_easy_setopt(c, CURLOPT_CAPATH, nullptr);
    }
    if (!tls_.cert.empty()) {
      curl_easy_setopt(c, CURLOPT_SSLCERT, tls_.cert.c_str());
      curl_easy_setopt(c, CURLOPT_SSLKEY, tls_.key.c_str());
    }
#if LIBCURL_VERSION_NUM >= 0x075700  // 7.87: curl caches the CA store (for a day by default)
    curl_easy_setopt(c, CURLOPT_CA_CACHE_TIMEOUT,
                     static_cast<long>(std::max<int64_t>(1, absl::ToInt64Seconds(tls_.refresh))));
#endif
    if (!server_name_.empty()) {
      // Dial the URL's host:port but verify (and send SNI for) server_name: the URL names the
      // server, CONNECT_TO says where it really is.
      const size_t host_start = 8;
      const size_t path = url.find('/', host_start);
      const std::string authority = url.substr(host_start, path - host_start);
      const size_t bracket = authority.rfind(']');  // an IPv6 literal's colons are not the port's
      const size_t colon = authority.find(':', bracket == std::string::npos ? 0 : bracket);
      if (colon == std::string::npos || authority.find(':', colon + 1) != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(method, " ", url, ": no port"));
      }
      const std::string port = authority.substr(colon + 1);
      target = absl::StrCat("https://", server_name_, ":", port,
                            path == std::string::npos ? "" : url.substr(path));
      connect_to.reset(curl_slist_append(
          nullptr, absl::StrCat(server_name_, ":", port, ":", authority.substr(0, colon), ":", port)
                       .c_str()));
    }
  }
  curl_easy_setopt(c, CURLOPT_CONNECT_TO, connect_to.get());
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> headers(nullptr,
                                                                      &curl_slist_free_all);
  for (const std::string& h : headers_)
    headers.reset(curl_slist_append(headers.release(), h.c_str()));
  if (json != nullptr) {
    headers.reset(curl_slist_append(headers.release(), "Content-Type: application/json"));
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(c, CURLOPT_URL, target.c_str());
  if (json == nullptr) {
    curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
  } else {
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(json->size()));
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, json->data());
  }
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
    return absl::UnavailableError(absl::StrCat(method, " ", url, ": ", curl_easy_strerror(rc)));
  }
  long code = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
  if (code != 200) {
    return absl::UnavailableError(
        absl::StrCat(method, " ", url, ": HTTP ", code, ": ", body.substr(0, 200)));
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

}  // namespace tandem
