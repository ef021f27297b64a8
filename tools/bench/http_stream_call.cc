#include "tools/bench/http_stream_call.h"

#include <curl/curl.h>

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"

namespace tandem::bench {
namespace {

// Reads the event stream line by line as it arrives.
struct Stream {
  std::string line;
  Clock::time_point first{}, last_text{};
  int chunks = 0;
  int usage_tokens = 0;
  bool done = false;
  std::string error;
  std::vector<double> gaps;

  void Line(const std::string& l) {
    if (l.rfind("data: ", 0) != 0) return;
    const std::string data = l.substr(6);
    if (data == "[DONE]") {
      done = true;
      return;
    }
    nlohmann::json j = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) {
      error = "an event that is not JSON";
      return;
    }
    if (j.contains("error")) error = j["error"].dump();
    if (j.contains("usage") && j["usage"].is_object() && j["usage"].contains("completion_tokens") &&
        j["usage"]["completion_tokens"].is_number_integer()) {
      usage_tokens = j["usage"]["completion_tokens"].get<int>();
    }
    if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty() ||
        !j["choices"][0].is_object() || !j["choices"][0].contains("delta")) {
      return;
    }
    const nlohmann::json& delta = j["choices"][0]["delta"];
    bool text = false;
    for (const char* f : {"content", "reasoning_content", "reasoning"}) {
      if (delta.is_object() && delta.contains(f) && delta[f].is_string() &&
          !delta[f].get_ref<const std::string&>().empty()) {
        text = true;
      }
    }
    if (!text) return;
    const Clock::time_point now = Clock::now();
    if (first == Clock::time_point{}) {
      first = now;
    } else {
      gaps.push_back(Ms(now - last_text));
    }
    last_text = now;
    ++chunks;
  }
};

size_t OnBytes(char* data, size_t size, size_t n, void* user) {
  auto* s = static_cast<Stream*>(user);
  for (size_t i = 0; i < size * n; ++i) {
    if (data[i] == '\n') {
      s->Line(s->line);
      s->line.clear();
    } else if (data[i] != '\r') {
      s->line.push_back(data[i]);
    }
  }
  return size * n;
}

void Run(Driver* driver, Clock::time_point scheduled) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  // One connection per thread, kept alive across the calls this thread makes.
  thread_local std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(),
                                                                        &curl_easy_cleanup);
  CURL* c = curl.get();
  Stream s;
  const std::string url = absl::StrCat("http://", driver->spec().address, "/v1/chat/completions");
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  if (const char* key = std::getenv("TANDEM_API_KEY"); key != nullptr && *key != '\0') {
    headers = curl_slist_append(headers, absl::StrCat("Authorization: Bearer ", key).c_str());
  }
  const std::string& body = driver->openai_body();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &OnBytes);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(driver->timeout())));
  CURLcode rc = curl_easy_perform(c);
  long connects = 0;
  curl_easy_getinfo(c, CURLINFO_NUM_CONNECTS, &connects);
  if ((rc == CURLE_SEND_ERROR || rc == CURLE_GOT_NOTHING || rc == CURLE_RECV_ERROR) &&
      connects == 0 && s.chunks == 0 && s.line.empty()) {
    // A kept-alive connection the server closed while idle: sent again on a fresh one, as
    // tandem-worker does (llama-server's HTTP library closes connections after a few requests).
    curl_easy_setopt(c, CURLOPT_FRESH_CONNECT, 1L);
    rc = curl_easy_perform(c);
    curl_easy_setopt(c, CURLOPT_FRESH_CONNECT, 0L);
  }
  long code = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
  curl_slist_free_all(headers);
  grpc::Status status;
  if (rc != CURLE_OK) {
    status = grpc::Status(grpc::StatusCode::UNAVAILABLE, curl_easy_strerror(rc));
  } else if (code != 200) {
    status = grpc::Status(grpc::StatusCode::UNAVAILABLE, absl::StrCat("HTTP ", code));
  } else if (!s.error.empty() || !s.done) {
    status = grpc::Status(grpc::StatusCode::INTERNAL,
                          s.error.empty() ? "stream ended before [DONE]" : s.error);
  }
  driver->Done(status, scheduled, s.first, Clock::now(),
               s.usage_tokens > 0 ? s.usage_tokens : s.chunks, &s.gaps);
}

}  // namespace

void StartHttpStreamCall(Driver* driver, Clock::time_point scheduled) {
  // Threads are kept (each with its kept-alive connection) and grow to the calls in flight, so
  // a closed loop of N calls reuses N connections as a real client would.
  struct Pool {
    absl::Mutex mu;
    std::deque<std::function<void()>> jobs ABSL_GUARDED_BY(mu);
    int idle ABSL_GUARDED_BY(mu) = 0;
  };
  static Pool* pool = new Pool();
  absl::MutexLock l(&pool->mu);
  pool->jobs.push_back([driver, scheduled] { Run(driver, scheduled); });
  if (pool->idle > 0) return;
  std::thread([] {
    for (;;) {
      std::function<void()> job;
      {
        absl::MutexLock l(&pool->mu);
        ++pool->idle;
        pool->mu.Await(absl::Condition(
            +[](Pool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu) { return !p->jobs.empty(); }, pool));
        --pool->idle;
        job = std::move(pool->jobs.front());
        pool->jobs.pop_front();
      }
      job();
    }
  }).detach();
}

}  // namespace tandem::bench
