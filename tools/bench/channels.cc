#include "tools/bench/channels.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/client_tls_flags.h"
#include "common/http_client.h"
#include "tandem/v1/gateway.grpc.pb.h"
#include "tandem/v1/worker.grpc.pb.h"

namespace tandem::bench {
namespace {

// Gateway: `model` (or any model) has a ready worker. Sets `why` when not.
bool GatewayReady(const std::shared_ptr<grpc::Channel>& channel, const std::string& model,
                  std::string* why) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  tandem::AddApiKey(&context);
  tandem::v1::ListModelsResponse response;
  grpc::Status s = tandem::v1::Gateway::NewStub(channel)->ListModels(&context, {}, &response);
  if (!s.ok()) {
    *why = s.error_message();
    return false;
  }
  for (const auto& m : response.models()) {
    if (m.ready_workers() > 0 && (model.empty() || m.name() == model)) return true;
  }
  *why = model.empty() ? "no model has a ready worker"
                       : absl::StrCat("model '", model, "' has no ready worker");
  return false;
}

// Worker: state STATE_READY. Sets `why` when not.
bool WorkerReady(const std::shared_ptr<grpc::Channel>& channel, std::string* why) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  tandem::v1::WorkerInfo info;
  grpc::Status s = tandem::v1::Worker::NewStub(channel)->GetInfo(&context, {}, &info);
  if (s.ok() && info.state() == tandem::v1::WorkerInfo::STATE_READY) return true;
  *why = s.ok() ? "not STATE_READY" : s.error_message();
  return false;
}

}  // namespace

// Made once: each set of TLS credentials watches its files with a thread of its own. Workers and
// gateways are reached alike (--plaintext, or TLS with --tls_ca and, for a worker that requires
// client certificates, --tls_cert/--tls_key).
std::shared_ptr<grpc::ChannelCredentials> CredentialsFor(Target /*target*/) {
  static const auto* creds = [] {
    auto creds = tandem::ChannelCredentialsFromFlags();
    if (!creds.ok()) {
      std::fprintf(stderr, "%s\n", std::string(creds.status().message()).c_str());
      std::exit(2);
    }
    return new std::shared_ptr<grpc::ChannelCredentials>(*std::move(creds));
  }();
  return *creds;
}

// Channels live until the process exits and are shared by every run to the same address. Besides
// reusing connections, this works around gRPC 1.51: when the last channel that used the callback
// API goes away, its shared "callback alternative" completion queue is shut down while a
// nexting thread may still poll it (seen here as a SIGSEGV in grpc_completion_queue_next when
// one run's channels were destroyed and the next run's created).
std::vector<std::shared_ptr<grpc::Channel>> MakeChannels(Target target, const std::string& address,
                                                         int n) {
  static absl::Mutex mu;
  static auto* cache = new std::map<std::pair<std::string, int>, std::shared_ptr<grpc::Channel>>;
  absl::MutexLock lock(&mu);
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < std::max(1, n); ++i) {
    if (auto it = cache->find({address, i}); it != cache->end()) {
      channels.push_back(it->second);
      continue;
    }
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // one connection per channel
    args.SetInt("tandem.bench.channel", i);
    args.SetMaxReceiveMessageSize(64 << 20);
    channels.push_back(grpc::CreateCustomChannel(address, CredentialsFor(target), args));
    (*cache)[{address, i}] = channels.back();
  }
  return channels;
}

absl::Status WaitReady(Target target, const std::string& address, const std::string& model,
                       absl::Duration timeout) {
  if (target == Target::kOpenAi) {
    // An OpenAI server is ready when it lists its models.
    CurlHttpClient http;
    const absl::Time deadline = absl::Now() + timeout;
    absl::Status last = absl::UnavailableError("no answer");
    while (absl::Now() < deadline) {
      last = http.Get(absl::StrCat("http://", address, "/v1/models"), absl::Seconds(2)).status();
      if (last.ok()) return last;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return absl::UnavailableError(
        absl::StrCat("openai at ", address, " not ready: ", last.message()));
  }
  auto channel = grpc::CreateChannel(address, CredentialsFor(target));
  const absl::Time deadline = absl::Now() + timeout;
  std::string last = "no answer";
  while (absl::Now() < deadline) {
    const bool ready = target == Target::kGateway ? GatewayReady(channel, model, &last)
                                                  : WorkerReady(channel, &last);
    if (ready) return absl::OkStatus();
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::UnavailableError(
      absl::StrCat(TargetName(target), " at ", address, " not ready: ", last));
}

}  // namespace tandem::bench
