// The floor gRPC 1.51 puts under a relaying gateway: a bare proxy that forwards every call, as
// opaque bytes, to one upstream, with nothing of Tandem in it (no routing, no metrics, no
// parsing). Two designs of the same proxy, run side by side by scripts/bench_proxy_floor.sh:
//
//   --mode=callback  the callback API, as tandem-gateway is written: a generic server reactor per
//                    call and a generic client reactor to the upstream; each reaction runs on
//                    gRPC's callback executor.
//   --mode=cq        the completion-queue API: --threads threads each own a completion queue
//                    that serves calls and makes their upstream calls, so a call's every step
//                    runs on the thread that polled it, with no hand-off.
//
// A measuring tool, not part of Tandem: no metadata or deadline forwarding, and a call the client
// cancels runs to its end upstream. TLS, when asked for, on both hops as the gateway does it:
// --tls_cert/--tls_key to clients, mutual TLS (--upstream_ca, --upstream_cert, --upstream_key) to
// the upstream. Prints "listening grpc=HOST:PORT mode=MODE" and
// runs until SIGTERM or SIGINT.

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(std::string, mode, "cq", "callback or cq");
ABSL_FLAG(std::string, listen, "127.0.0.1:0", "HOST:PORT to serve on (port 0: any free port)");
ABSL_FLAG(std::string, upstream, "", "HOST:PORT every call is forwarded to (plaintext)");
ABSL_FLAG(int, threads, 2, "cq: threads, each with its own completion queue");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate served to clients (TLS; with --tls_key)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, upstream_ca, "", "PEM CA the upstream's certificate is checked against");
ABSL_FLAG(std::string, upstream_cert, "", "PEM client certificate presented to the upstream");
ABSL_FLAG(std::string, upstream_key, "", "PEM private key of --upstream_cert");

namespace {

using grpc::ByteBuffer;

// --mode=callback: one server reactor per call, owning the client reactor of its upstream call.
class CallbackCall final : public grpc::ServerGenericBidiReactor {
 public:
  CallbackCall(grpc::GenericCallbackServerContext* context, grpc::GenericStub* stub)
      : upstream_(this) {
    stub->PrepareBidiStreamingCall(&upstream_context_, context->method(), {}, &upstream_);
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The upstream call never starts, so its OnDone never runs.
      refs_.fetch_sub(1, std::memory_order_acq_rel);
      Finish(grpc::Status(grpc::StatusCode::INTERNAL, "no request message"));
      return;
    }
    upstream_.Forward(request_);
  }
  // The relayed message is written: read the next one from upstream.
  void OnWriteDone(bool /*ok*/) override { upstream_.ReadNext(); }
  void OnCancel() override { upstream_context_.TryCancel(); }
  void OnDone() override { Unref(); }

 private:
  class Upstream final : public grpc::ClientBidiReactor<ByteBuffer, ByteBuffer> {
   public:
    explicit Upstream(CallbackCall* call) : call_(call) {}
    void Forward(const ByteBuffer& request) {
      // Held until the last message is read: without it the call may end (OnDone) while the
      // server side still writes the message before, and the next StartRead would follow it.
      AddHold();
      StartWrite(&request);
      StartWritesDone();
      StartRead(&response_);
      StartCall();
    }
    void ReadNext() { StartRead(&response_); }
    // One message at a time: the next read starts when the server side has written this one.
    void OnReadDone(bool ok) override {
      if (ok) {
        call_->StartWrite(&response_);
      } else {
        RemoveHold();
      }
    }
    void OnDone(const grpc::Status& status) override {
      call_->Finish(status);
      call_->Unref();
    }

   private:
    CallbackCall* const call_;
    ByteBuffer response_;
  };

  // Both reactors' OnDone must have run before the call (which holds the upstream's context and
  // reactor) goes: the server side's can run, on another thread, while the upstream's OnDone is
  // still finishing.
  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  ByteBuffer request_;
  grpc::ClientContext upstream_context_;
  Upstream upstream_;
  std::atomic<int> refs_{2};
};

class CallbackProxy final : public grpc::CallbackGenericService {
 public:
  explicit CallbackProxy(std::shared_ptr<grpc::Channel> upstream) : stub_(std::move(upstream)) {}
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    return new CallbackCall(context, &stub_);
  }

 private:
  grpc::GenericStub stub_;
};

// --mode=cq: one call's steps, each started when the previous one completes on the queue of the
// thread that accepted the call; the upstream call uses that same queue. Aligned to 16 bytes so
// that a tag carries the step in its low 4 bits.
class alignas(16) CqCall {
 public:
  CqCall(grpc::AsyncGenericService* service, grpc::ServerCompletionQueue* cq,
         grpc::GenericStub* stub)
      : service_(service), cq_(cq), stub_(stub), stream_(&context_) {
    service_->RequestCall(&context_, &stream_, cq_, cq_, Tag(kAccepted));
  }

  // Runs the step that completed; deletes the call after its last one.
  void Proceed(int step, bool ok) {
    switch (step) {
      case kAccepted:
        if (!ok) {  // the server is shutting down
          delete this;
          return;
        }
        new CqCall(service_, cq_, stub_);  // waits for the next caller
        return stream_.Read(&request_, Tag(kRequestRead));
      case kRequestRead:
        if (!ok) {
          return stream_.Finish(grpc::Status(grpc::StatusCode::INTERNAL, "no request message"),
                                Tag(kFinished));
        }
        upstream_ = stub_->PrepareCall(&upstream_context_, context_.method(), cq_);
        return upstream_->StartCall(Tag(kUpstreamStarted));
      case kUpstreamStarted:
        return upstream_->Write(request_, Tag(kUpstreamWritten));
      case kUpstreamWritten:
        return upstream_->WritesDone(Tag(kUpstreamHalfClosed));
      case kUpstreamHalfClosed:
      case kRelayed:
        return upstream_->Read(&response_, Tag(kUpstreamRead));
      case kUpstreamRead:
        if (ok) return stream_.Write(response_, Tag(kRelayed));
        return upstream_->Finish(&status_, Tag(kUpstreamFinished));
      case kUpstreamFinished:
        return stream_.Finish(status_, Tag(kFinished));
      case kFinished:
        delete this;
        return;
    }
  }

  // Runs the step a completion-queue tag names.
  static void Dispatch(void* tag, bool ok) {
    const auto bits = reinterpret_cast<uintptr_t>(tag);
    reinterpret_cast<CqCall*>(bits & ~uintptr_t{15})->Proceed(static_cast<int>(bits & 15), ok);
  }

 private:
  enum Step {
    kAccepted,
    kRequestRead,
    kUpstreamStarted,
    kUpstreamWritten,
    kUpstreamHalfClosed,
    kUpstreamRead,
    kRelayed,
    kUpstreamFinished,
    kFinished,
  };
  void* Tag(Step step) { return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(this) | step); }

  grpc::AsyncGenericService* const service_;
  grpc::ServerCompletionQueue* const cq_;
  grpc::GenericStub* const stub_;
  grpc::GenericServerContext context_;
  grpc::GenericServerAsyncReaderWriter stream_;
  ByteBuffer request_, response_;
  grpc::ClientContext upstream_context_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> upstream_;
  grpc::Status status_;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) {
    std::cerr << "cannot read " << path << "\n";
    std::exit(2);
  }
  return text.str();
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentials() {
  if (absl::GetFlag(FLAGS_tls_cert).empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back(
      {ReadFile(absl::GetFlag(FLAGS_tls_key)), ReadFile(absl::GetFlag(FLAGS_tls_cert))});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> UpstreamCredentials() {
  if (absl::GetFlag(FLAGS_upstream_ca).empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = ReadFile(absl::GetFlag(FLAGS_upstream_ca));
  if (!absl::GetFlag(FLAGS_upstream_cert).empty()) {
    options.pem_cert_chain = ReadFile(absl::GetFlag(FLAGS_upstream_cert));
    options.pem_private_key = ReadFile(absl::GetFlag(FLAGS_upstream_key));
  }
  return grpc::SslCredentials(options);
}

// Waits for SIGTERM or SIGINT (blocked in every thread, so only this wait sees them).
void WaitForSignal(const sigset_t& signals) {
  int signal = 0;
  sigwait(&signals, &signal);
}

int Run() {
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (absl::GetFlag(FLAGS_upstream).empty() || (mode != "callback" && mode != "cq")) {
    std::cerr << "usage: grpc_proxy_floor --mode=callback|cq --upstream=HOST:PORT\n";
    return 2;
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto channel = grpc::CreateChannel(absl::GetFlag(FLAGS_upstream), UpstreamCredentials());
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(absl::GetFlag(FLAGS_listen), ServerCredentials(), &port);
  CallbackProxy callback_proxy(channel);
  grpc::AsyncGenericService cq_service;
  grpc::GenericStub cq_stub(channel);
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues;
  if (mode == "callback") {
    builder.RegisterCallbackGenericService(&callback_proxy);
  } else {
    builder.RegisterAsyncGenericService(&cq_service);
    for (int i = 0; i < std::max(1, absl::GetFlag(FLAGS_threads)); ++i) {
      queues.push_back(builder.AddCompletionQueue());
    }
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::cerr << "cannot listen on " << absl::GetFlag(FLAGS_listen) << "\n";
    return 1;
  }
  std::vector<std::thread> threads;
  for (auto& q : queues) {
    grpc::ServerCompletionQueue* cq = q.get();
    new CqCall(&cq_service, cq, &cq_stub);
    threads.emplace_back([cq] {
      void* tag = nullptr;
      bool ok = false;
      while (cq->Next(&tag, &ok)) CqCall::Dispatch(tag, ok);
    });
  }
  const std::string host =
      absl::GetFlag(FLAGS_listen).substr(0, absl::GetFlag(FLAGS_listen).rfind(':'));
  std::cout << "listening grpc=" << host << ":" << port << " mode=" << mode << std::endl;
  WaitForSignal(signals);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  for (auto& q : queues) q->Shutdown();
  for (auto& t : threads) t.join();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return Run();
}
