#include "tests/support/fake_engine.h"

#include <future>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tandem::testing {
namespace {

constexpr char kDefaultStream[] =
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"}}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" world\"}}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\n"
    "data: [DONE]\n\n";

HttpResponse Json(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.headers = {{"content-type", "application/json"}};
  r.body = std::move(body);
  return r;
}

// Writes `bytes` and waits until it is written; false when the client is gone.
bool WriteAndWait(HttpExchange& ex, std::string bytes) {
  auto done = std::make_shared<std::promise<bool>>();
  auto f = done->get_future();
  ex.Write(std::move(bytes), [done](bool ok) { done->set_value(ok); });
  return f.get();
}

}  // namespace

absl::StatusOr<std::unique_ptr<FakeEngine>> FakeEngine::Start() {
  std::unique_ptr<FakeEngine> e(new FakeEngine());
  e->SetStream(kDefaultStream);
  FakeEngine* raw = e.get();
  auto server = HttpServer::Start("127.0.0.1:0", HttpServerOptions(),
                                  [raw](std::shared_ptr<HttpExchange> ex) { raw->Handle(ex); });
  if (!server.ok()) return server.status();
  e->server_ = std::move(*server);
  return e;
}

FakeEngine::~FakeEngine() {
  stopping_.store(true);
  std::vector<std::thread> threads;
  {
    absl::MutexLock l(&mu_);
    threads.swap(streamers_);
  }
  for (std::thread& t : threads) t.join();
  server_.reset();
}

void FakeEngine::RequireKey(const std::string& key) {
  absl::MutexLock l(&mu_);
  key_ = key;
}
void FakeEngine::SetModel(const std::string& id) {
  absl::MutexLock l(&mu_);
  model_ = id;
}
void FakeEngine::SetMetrics(const std::string& text) {
  absl::MutexLock l(&mu_);
  metrics_ = text;
}
void FakeEngine::SetStream(const std::string& sse) {
  absl::MutexLock l(&mu_);
  stream_ = sse;
}
void FakeEngine::SetEventDelay(absl::Duration d) {
  absl::MutexLock l(&mu_);
  event_delay_ = d;
}
std::string FakeEngine::last_chat_body() const {
  absl::MutexLock l(&mu_);
  return last_body_;
}

void FakeEngine::Handle(std::shared_ptr<HttpExchange> ex) {
  const std::string& target = ex->request().target;
  {
    absl::MutexLock l(&mu_);
    if (!key_.empty() && ex->request().Header("authorization") != "Bearer " + key_) {
      ex->Respond(Json(401, "{\"error\":{\"message\":\"invalid api key\"}}"));
      return;
    }
  }
  if (target == "/health") {
    const int s = health_.load();
    ex->Respond(Json(s, s == 200 ? "{\"status\":\"ok\"}" : "{\"error\":\"Loading model\"}"));
  } else if (target == "/v1/models") {
    absl::MutexLock l(&mu_);
    ex->Respond(Json(200, absl::StrCat("{\"object\":\"list\",\"data\":[{\"id\":\"", model_,
                                       "\",\"object\":\"model\"}]}")));
  } else if (target == "/metrics") {
    absl::MutexLock l(&mu_);
    HttpResponse r;
    r.status = metrics_.empty() ? 500 : 200;
    r.body = metrics_;
    ex->Respond(std::move(r));
  } else if (target == "/v1/chat/completions" && ex->request().method == "POST") {
    ServeChat(std::move(ex));
  } else {
    ex->Respond(Json(404, "{\"error\":{\"message\":\"not found\"}}"));
  }
}

void FakeEngine::ServeChat(std::shared_ptr<HttpExchange> ex) {
  chat_requests_.fetch_add(1);
  absl::MutexLock l(&mu_);
  last_body_ = ex->request().body;
  const Chat mode = chat_.load();
  if (mode == Chat::kStatus) {
    ex->Respond(Json(chat_status_.load(),
                     "{\"error\":{\"message\":\"scripted failure\",\"type\":\"server_error\"}}"));
    return;
  }
  if (mode == Chat::kReplay && absl::StrContains(last_body_, "\"stream\":false")) {
    ex->Respond(Json(200,
                     "{\"id\":\"fake-1\",\"object\":\"chat.completion\",\"choices\":[{\"index\":0,"
                     "\"message\":{\"role\":\"assistant\",\"content\":\"OK\"},\"finish_reason\":"
                     "\"length\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}"));
    return;
  }
  HttpResponse head;
  head.headers = {{"content-type", "text/event-stream"}};
  ex->StartStream(head);
  if (mode == Chat::kHang) {
    hung_.push_back(std::move(ex));  // answered never; closed when the engine stops
    return;
  }
  if (mode == Chat::kGarbage) {
    ex->EndStream("data: {not json at all\n\n\x01\x02garbage\n\n");
    return;
  }
  std::vector<std::string> events = absl::StrSplit(stream_, "\n\n", absl::SkipEmpty());
  if (mode == Chat::kTruncate) events.resize(events.size() / 2);
  const absl::Duration delay = event_delay_;
  streamers_.emplace_back([this, ex, events = std::move(events), delay] {
    for (const std::string& e : events) {
      if (stopping_.load()) break;
      if (delay > absl::ZeroDuration()) absl::SleepFor(delay);  // the engine's pace, not a wait
      if (!WriteAndWait(*ex, e + "\n\n")) return;
    }
    ex->EndStream("");
  });
}

}  // namespace tandem::testing
