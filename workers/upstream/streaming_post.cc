#include "workers/upstream/streaming_post.h"

#include <curl/curl.h>

#include <algorithm>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace tandem::workers::upstream {
namespace {}  // namespace

struct TransferState {
  CURL* easy;
  absl::FunctionRef<absl::Status(absl::string_view)>* on_body;
  StreamingPost::Result* result;
  size_t max_error_body;
  absl::Status body_status;
  CURLcode curl_code = CURLE_OK;
};

namespace {

size_t OnWrite(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<TransferState*>(user);
  const size_t bytes = size * n;
  long code = 0;
  curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &code);
  if (code != 200) {
    std::string& e = t->result->error_body;
    e.append(data, std::min(bytes, t->max_error_body - std::min(t->max_error_body, e.size())));
    return bytes;
  }
  t->body_status = (*t->on_body)(absl::string_view(data, bytes));
  return t->body_status.ok() ? bytes : 0;  // a short count aborts the transfer
}

}  // namespace

StreamingPost::StreamingPost(Options options) : options_(std::move(options)) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  easy_ = curl_easy_init();
  multi_ = curl_multi_init();
}

StreamingPost::~StreamingPost() {
  curl_multi_cleanup(static_cast<CURLM*>(multi_));
  curl_easy_cleanup(static_cast<CURL*>(easy_));
}

StreamingPost::Result StreamingPost::Post(
    const std::string& url, const std::string& body, std::chrono::steady_clock::time_point deadline,
    absl::FunctionRef<absl::Status(absl::string_view)> on_body,
    absl::FunctionRef<bool()> should_stop) {
  CURL* c = static_cast<CURL*>(easy_);
  CURLM* m = static_cast<CURLM*>(multi_);
  if (c == nullptr || m == nullptr) {
    Result result;
    result.status = absl::InternalError("curl_easy_init failed");
    return result;
  }
  TransferState t{c, &on_body, nullptr, options_.max_error_body, absl::OkStatus()};
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> headers(nullptr,
                                                                      &curl_slist_free_all);
  headers.reset(curl_slist_append(headers.release(), "Content-Type: application/json"));
  headers.reset(curl_slist_append(headers.release(), "Accept: text/event-stream"));
  if (!options_.api_key.empty()) {
    headers.reset(curl_slist_append(
        headers.release(), absl::StrCat("Authorization: Bearer ", options_.api_key).c_str()));
  }
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &OnWrite);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(options_.connect_timeout)));
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME,
                   std::max(1L, static_cast<long>(absl::ToInt64Seconds(options_.idle_timeout))));
  if (!options_.tls.ca.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, options_.tls.ca.c_str());
  if (!options_.tls.cert.empty()) {
    curl_easy_setopt(c, CURLOPT_SSLCERT, options_.tls.cert.c_str());
    curl_easy_setopt(c, CURLOPT_SSLKEY, options_.tls.key.c_str());
  }
  Result result = Transfer(c, m, deadline, should_stop, &t);
  // A kept-alive connection the engine closed while idle (llama-server's HTTP library closes one
  // after a few requests) fails before anything comes back: the engine never saw the request,
  // so it is sent once more on a fresh connection.
  long connects = 0;
  curl_easy_getinfo(c, CURLINFO_NUM_CONNECTS, &connects);
  if (connects == 0 && result.http_status == 0 &&
      result.status.code() == absl::StatusCode::kUnavailable &&
      (t.curl_code == CURLE_SEND_ERROR || t.curl_code == CURLE_GOT_NOTHING ||
       t.curl_code == CURLE_RECV_ERROR)) {
    curl_easy_setopt(c, CURLOPT_FRESH_CONNECT, 1L);
    result = Transfer(c, m, deadline, should_stop, &t);
    curl_easy_setopt(c, CURLOPT_FRESH_CONNECT, 0L);
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, nullptr);
  return result;
}

StreamingPost::Result StreamingPost::Transfer(void* easy, void* multi,
                                              std::chrono::steady_clock::time_point deadline,
                                              absl::FunctionRef<bool()> should_stop,
                                              void* transfer) {
  CURL* c = static_cast<CURL*>(easy);
  CURLM* m = static_cast<CURLM*>(multi);
  auto& t = *static_cast<TransferState*>(transfer);
  Result result;
  t.result = &result;
  t.body_status = absl::OkStatus();
  curl_multi_add_handle(m, c);
  const int poll_ms = std::max(1, static_cast<int>(absl::ToInt64Milliseconds(options_.poll)));
  bool stopped = false;
  bool expired = false;
  for (;;) {
    int running = 0;
    curl_multi_perform(m, &running);
    if (running == 0) break;
    if (should_stop()) {
      stopped = true;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      expired = true;
      break;
    }
    curl_multi_poll(m, nullptr, 0, poll_ms, nullptr);
  }
  CURLcode rc = CURLE_OK;
  int left = 0;
  while (CURLMsg* msg = curl_multi_info_read(m, &left)) {
    if (msg->msg == CURLMSG_DONE) rc = msg->data.result;
  }
  t.curl_code = rc;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &result.http_status);
  // Removing a transfer that has not ended closes its connection: the engine sees the client go.
  curl_multi_remove_handle(m, c);
  if (stopped) {
    result.status = absl::CancelledError("the call was cancelled");
  } else if (expired) {
    result.status = absl::DeadlineExceededError("the deadline passed while the engine answered");
  } else if (!t.body_status.ok()) {
    result.status = t.body_status;
  } else if (rc != CURLE_OK) {
    const char* url = nullptr;
    curl_easy_getinfo(c, CURLINFO_EFFECTIVE_URL, &url);
    result.status = absl::UnavailableError(
        absl::StrCat("engine at ", url != nullptr ? url : "", ": ", curl_easy_strerror(rc)));
  }
  return result;
}

}  // namespace tandem::workers::upstream
