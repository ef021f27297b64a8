#include "common/proto_request.h"

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/utf8.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/stubs/logging.h"
#include "google/protobuf/unknown_field_set.h"
#include "spdlog/spdlog.h"

namespace tandem {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::UnknownField;
using google::protobuf::UnknownFieldSet;

// Messages nest this deep at most in Tandem's API; deeper input is malformed anyway.
constexpr int kMaxDepth = 16;

// The path of the first string field in `fields` (a message of type `type`, parsed without
// schema) that is not valid UTF-8.
std::optional<std::string> FindInvalidUtf8(const Descriptor* type, const UnknownFieldSet& fields,
                                           const std::string& path, int depth) {
  std::map<int, int> seen;  // field number -> occurrences so far (the index of a repeated one)
  for (int i = 0; i < fields.field_count(); ++i) {
    const UnknownField& f = fields.field(i);
    const int index = seen[f.number()]++;
    const FieldDescriptor* field = type->FindFieldByNumber(f.number());
    if (field == nullptr || f.type() != UnknownField::TYPE_LENGTH_DELIMITED) continue;
    std::string name = absl::StrCat(path, path.empty() ? "" : ".", field->name());
    if (field->is_repeated()) absl::StrAppend(&name, "[", index, "]");
    if (field->type() == FieldDescriptor::TYPE_STRING) {
      if (!IsValidUtf8(f.length_delimited())) return name;
    } else if (field->type() == FieldDescriptor::TYPE_MESSAGE && depth < kMaxDepth) {
      UnknownFieldSet inner;
      if (!inner.ParseFromString(f.length_delimited())) continue;
      if (auto bad = FindInvalidUtf8(field->message_type(), inner, name, depth + 1)) return bad;
    }
  }
  return std::nullopt;
}

void ProtobufLog(google::protobuf::LogLevel level, const char* file, int line,
                 const std::string& message) {
  if (absl::StrContains(message, "invalid UTF-8 data when parsing")) return;
  switch (level) {
    case google::protobuf::LOGLEVEL_INFO:
      spdlog::info("protobuf {}:{}: {}", file, line, message);
      break;
    case google::protobuf::LOGLEVEL_WARNING:
      spdlog::warn("protobuf {}:{}: {}", file, line, message);
      break;
    default:
      spdlog::error("protobuf {}:{}: {}", file, line, message);
  }
}

}  // namespace

absl::Status ParseRequest(const grpc::ByteBuffer& bytes, google::protobuf::Message* out) {
  grpc::ByteBuffer copy(bytes);  // shares the slices; the reader consumes its buffer
  grpc::ProtoBufferReader reader(&copy);
  if (out->ParseFromZeroCopyStream(&reader)) return absl::OkStatus();
  // The error path only: say why.
  std::vector<grpc::Slice> slices;
  std::string data;
  if (bytes.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices)
      data.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  UnknownFieldSet fields;
  if (fields.ParseFromString(data)) {
    if (auto bad = FindInvalidUtf8(out->GetDescriptor(), fields, "", 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(*bad, ": not valid UTF-8 (protobuf string fields must be UTF-8)"));
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("request: not a valid ",
                                                 out->GetDescriptor()->full_name(),
                                                 " (malformed protobuf, ", data.size(), " bytes)"));
}

void SerializeResponse(const google::protobuf::Message& message, grpc::ByteBuffer* out) {
  out->Clear();  // a stream reuses its buffer; the previous write has completed
  bool own_buffer = false;
  // Serializing a message built in memory fails only when it is over 2 GiB, which the request
  // limits rule out.
  (void)grpc::SerializationTraits<google::protobuf::Message>::Serialize(message, out, &own_buffer);
}

void RouteProtobufLogsToSpdlog() { google::protobuf::SetLogHandler(&ProtobufLog); }

}  // namespace tandem
