#pragma once

#include <grpcpp/support/byte_buffer.h>

#include "absl/status/status.h"
#include "google/protobuf/message.h"

namespace tandem {

// Parses a request that a server received as raw bytes (a gRPC raw callback method). gRPC's own
// parse failure reaches the caller as UNIMPLEMENTED with no message; this answers
// INVALID_ARGUMENT naming the problem: the first string field that is not valid UTF-8 (proto3
// requires it), by its path ("messages[1].role: not valid UTF-8"), or a malformed message.
absl::Status ParseRequest(const grpc::ByteBuffer& bytes, google::protobuf::Message* out);

// `message` as a raw method's answer.
void SerializeResponse(const google::protobuf::Message& message, grpc::ByteBuffer* out);

// Sends protobuf's own log lines to spdlog, except the one it writes for every string field with
// invalid UTF-8 it refuses to parse: those requests are answered with INVALID_ARGUMENT (and
// logged within --rejected_log_per_second), so a caller cannot fill the log with them. Call once
// at start-up, before any thread parses.
void RouteProtobufLogsToSpdlog();

}  // namespace tandem
