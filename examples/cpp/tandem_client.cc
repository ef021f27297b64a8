// A Tandem client in C++: one request, unary or streamed, over TLS or plaintext.
//
//   tandem-client-example --address=localhost:7000 --ca=ca.crt --api_key=KEY --stream "Hi!"
//
// Built with the project (CMake target tandem-client-example); it uses only gRPC, protobuf and
// the generated tandem.v1 stubs.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "tandem/v1/gateway.grpc.pb.h"

namespace {

struct Args {
  std::string address = "localhost:7000";
  std::string ca;  // PEM of the CA that signed the gateway's certificate; plaintext when empty
  std::string api_key;
  bool stream = false;
  int max_tokens = 64;
  int timeout_seconds = 60;
  std::string prompt;
};

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto value = [&](const char* flag) -> const char* {
      const std::string prefix = std::string(flag) + "=";
      return s.rfind(prefix, 0) == 0 ? argv[i] + prefix.size() : nullptr;
    };
    if (const char* v = value("--address")) {
      a.address = v;
    } else if (const char* v = value("--ca")) {
      a.ca = v;
    } else if (const char* v = value("--api_key")) {
      a.api_key = v;
    } else if (const char* v = value("--max_tokens")) {
      a.max_tokens = std::atoi(v);
    } else if (const char* v = value("--timeout")) {
      a.timeout_seconds = std::atoi(v);
    } else if (s == "--stream") {
      a.stream = true;
    } else {
      a.prompt = s;
    }
  }
  return a;
}

const char* CodeName(grpc::StatusCode code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  const int i = static_cast<int>(code);
  return i >= 0 && i < 17 ? kNames[i] : "UNKNOWN";
}

// RESOURCE_EXHAUSTED and UNAVAILABLE are retryable; retry-after-ms says when.
int Fail(const grpc::Status& s, const grpc::ClientContext& ctx) {
  std::cerr << CodeName(s.error_code()) << ": " << s.error_message();
  const auto& trailers = ctx.GetServerTrailingMetadata();
  if (auto it = trailers.find("retry-after-ms"); it != trailers.end()) {
    std::cerr << " (retry after " << std::string(it->second.data(), it->second.size()) << " ms)";
  }
  std::cerr << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = Parse(argc, argv);
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!args.ca.empty()) {
    std::ifstream in(args.ca);
    std::stringstream pem;
    pem << in.rdbuf();
    grpc::SslCredentialsOptions tls;
    tls.pem_root_certs = pem.str();
    creds = grpc::SslCredentials(tls);
  }
  auto stub = tandem::v1::Gateway::NewStub(grpc::CreateChannel(args.address, creds));

  tandem::v1::GenerateRequest request;
  auto* message = request.add_messages();
  message->set_role("user");
  message->add_content()->set_text(args.prompt);
  request.mutable_sampling()->set_max_tokens(args.max_tokens);

  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(args.timeout_seconds));
  if (!args.api_key.empty()) ctx.AddMetadata("authorization", "Bearer " + args.api_key);

  if (args.stream) {
    auto reader = stub->GenerateStream(&ctx, request);
    tandem::v1::GenerateStreamChunk chunk;
    while (reader->Read(&chunk)) {
      if (chunk.has_route()) {
        std::cerr << "[" << chunk.route().model() << ": " << chunk.route().reason() << "]\n";
      }
      std::cout << chunk.text() << std::flush;
    }
    std::cout << "\n";
    const grpc::Status s = reader->Finish();
    return s.ok() ? 0 : Fail(s, ctx);
  }
  tandem::v1::GenerateResponse answer;
  const grpc::Status s = stub->Generate(&ctx, request, &answer);
  if (!s.ok()) return Fail(s, ctx);
  std::cerr << "[" << answer.route().model() << ": " << answer.route().reason() << "]\n";
  std::cout << answer.text() << "\n";
  return 0;
}
