#pragma once

#include "gateway/dispatch/dispatcher.h"
#include "tandem/v1/gateway.grpc.pb.h"

namespace tandem::gateway {

// tandem.v1.Gateway over the callback API. No thread is held per request: each call is a
// reactor pair (server side to the client, client side to the worker) that relays chunk by
// chunk, one message in flight each way, with the client's deadline, cancellation and request
// id propagated to the worker. Generate and GenerateStream are GenerationCall reactors
// (gateway/dispatch/generation_call.h), whose retries, failovers, hedges and stall watch are
// GenerationAttempts' decisions (gateway/dispatch/generation_attempts.h).
//
// The three methods taking a GenerateRequest receive it as bytes and parse it themselves
// (ParseRequest): gRPC answers a request it cannot parse with UNIMPLEMENTED and no message, and
// invalid UTF-8 in a string field is such a request. Their answers are GenerateResponse,
// GenerateStreamChunk and RouteResponse, serialized here.
class GrpcFront final : public tandem::v1::Gateway::WithRawCallbackMethod_Generate<
                            tandem::v1::Gateway::WithRawCallbackMethod_GenerateStream<
                                tandem::v1::Gateway::WithRawCallbackMethod_Route<
                                    tandem::v1::Gateway::WithCallbackMethod_ListModels<
                                        tandem::v1::Gateway::Service>>>> {
 public:
  // `dispatcher` outlives the front.
  explicit GrpcFront(Dispatcher* dispatcher) : dispatcher_(dispatcher) {}

  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerateStream(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Route(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const tandem::v1::ListModelsRequest* request,
                                       tandem::v1::ListModelsResponse* response) override;

  Dispatcher& dispatcher() const { return *dispatcher_; }

 private:
  Dispatcher* const dispatcher_;
};

}  // namespace tandem::gateway
