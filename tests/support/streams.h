#pragma once

// Calls with a deadline, streams read to their end: a gateway's Generate, its GenerateStream
// with a hook on its first chunk, and a worker's Generate.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tandem/v1/gateway.grpc.pb.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "tests/support/requests.h"

namespace tandem::testing {

// A unary Generate of `req` within `deadline`.
inline grpc::Status UnaryGenerate(tandem::v1::Gateway::Stub* stub,
                                  const tandem::v1::GenerateRequest& req,
                                  tandem::v1::GenerateResponse* resp,
                                  std::chrono::milliseconds deadline = std::chrono::seconds(10)) {
  grpc::ClientContext ctx;
  Deadline(&ctx, deadline);
  return stub->Generate(&ctx, req, resp);
}

// The worker's GetInfo at `address` (a fresh channel), within 10 s.
inline grpc::Status GetWorkerInfo(const std::string& address, tandem::v1::WorkerInfo* info) {
  auto stub =
      tandem::v1::Worker::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  Deadline(&ctx, std::chrono::seconds(10));
  return stub->GetInfo(&ctx, {}, info);
}

// What a stream of Chunk gave: its status, its text, its first and last chunks and their count.
template <typename Chunk>
struct StreamResult {
  grpc::Status status;
  std::string text;
  Chunk first;
  Chunk last;
  int chunks = 0;
};

// Reads `reader` to its end, calling `on_chunk` (when set) on each chunk.
template <typename Chunk>
StreamResult<Chunk> ReadToEnd(grpc::ClientReaderInterface<Chunk>* reader,
                              const std::function<void(const Chunk&)>& on_chunk = nullptr) {
  StreamResult<Chunk> out;
  Chunk c;
  while (reader->Read(&c)) {
    out.text += c.text();
    if (++out.chunks == 1) out.first = c;
    out.last = c;
    if (on_chunk) on_chunk(c);
  }
  out.status = reader->Finish();
  return out;
}

using Streamed = StreamResult<tandem::v1::GenerateStreamChunk>;

// Reads GenerateStream(`req`) to its end within `deadline`, calling `on_first` (when set) after
// the first chunk.
inline Streamed StreamWith(
    tandem::v1::Gateway::Stub* stub, const tandem::v1::GenerateRequest& req,
    const std::function<void(const tandem::v1::GenerateStreamChunk&)>& on_first = nullptr,
    std::chrono::milliseconds deadline = std::chrono::seconds(60)) {
  grpc::ClientContext ctx;
  Deadline(&ctx, deadline);
  bool first = true;
  return ReadToEnd<tandem::v1::GenerateStreamChunk>(stub->GenerateStream(&ctx, req).get(),
                                                    [&](const tandem::v1::GenerateStreamChunk& c) {
                                                      if (first && on_first) on_first(c);
                                                      first = false;
                                                    });
}

// What a worker's Generate gave, and the prompt tokens it reported.
struct WorkerCall : StreamResult<tandem::v1::WorkerGenerateChunk> {
  int32_t prompt_tokens = 0;
};

// Reads the worker's Generate(`req`) to its end within `deadline`.
inline WorkerCall WorkerGenerate(tandem::v1::Worker::Stub* stub,
                                 const tandem::v1::WorkerGenerateRequest& req,
                                 std::chrono::milliseconds deadline = std::chrono::seconds(20)) {
  grpc::ClientContext ctx;
  Deadline(&ctx, deadline);
  int32_t prompt_tokens = 0;
  WorkerCall out{ReadToEnd<tandem::v1::WorkerGenerateChunk>(
      stub->Generate(&ctx, req).get(), [&](const tandem::v1::WorkerGenerateChunk& c) {
        if (c.prompt_tokens() > 0) prompt_tokens = c.prompt_tokens();
      })};
  out.prompt_tokens = prompt_tokens;
  return out;
}

// The same on a fresh channel to the worker at `address`.
inline WorkerCall WorkerGenerate(const std::string& address,
                                 const tandem::v1::WorkerGenerateRequest& req,
                                 std::chrono::milliseconds deadline = std::chrono::seconds(20)) {
  auto stub =
      tandem::v1::Worker::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  return WorkerGenerate(stub.get(), req, deadline);
}

}  // namespace tandem::testing
