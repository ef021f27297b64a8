#include "common/proto_request.h"

#include <grpcpp/support/proto_buffer_writer.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tandem/v1/gateway.pb.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

grpc::ByteBuffer Bytes(const std::string& data) {
  grpc::Slice slice(data);
  return grpc::ByteBuffer(&slice, 1);
}

// `request` serialized, with every "@@" in it replaced by two bytes that are not UTF-8: proto3
// refuses such a string field, which a client in another language (or a raw HTTP/2 client) can
// still send.
std::string WithInvalidUtf8(const tandem::v1::GenerateRequest& request) {
  std::string data = request.SerializeAsString();
  for (size_t at = data.find("@@"); at != std::string::npos; at = data.find("@@", at)) {
    data[at] = '\xff';
    data[at + 1] = '\xfe';
  }
  return data;
}

tandem::v1::GenerateRequest Chat() {
  tandem::v1::GenerateRequest r;
  auto* m = r.add_messages();
  m->set_role("user");
  m->add_content()->set_text("hello");
  return r;
}

TEST(ParseRequestTest, ParsesAValidRequest) {
  tandem::v1::GenerateRequest want = Chat();
  want.set_request_id("r1");
  tandem::v1::GenerateRequest got;
  ASSERT_TRUE(ParseRequest(Bytes(want.SerializeAsString()), &got).ok());
  EXPECT_EQ(got.request_id(), "r1");
  EXPECT_EQ(got.messages(0).content(0).text(), "hello");
}

// (Protobuf's parser leaves the strings of ChatMessage unchecked: ValidateMessages checks them.)
TEST(ParseRequestTest, NamesTheStringFieldThatIsNotUtf8) {
  struct Case {
    std::function<void(tandem::v1::GenerateRequest*)> edit;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](auto* r) { r->set_request_id("id@@"); }, "request_id: not valid UTF-8"},
      {[](auto* r) {
         r->mutable_sampling()->add_stop("ok");
         r->mutable_sampling()->add_stop("@@");
       },
       "sampling.stop[1]"},
      {[](auto* r) { r->mutable_hints()->set_model("@@"); }, "hints.model"},
      {[](auto* r) { (*r->mutable_labels())["app"] = "@@"; }, "labels[0].value"},
      {[](auto* r) { (*r->mutable_labels())["@@"] = "x"; }, "labels[0].key"},
  };
  for (const Case& c : cases) {
    tandem::v1::GenerateRequest r = Chat();
    c.edit(&r);
    tandem::v1::GenerateRequest out;
    const absl::Status s = ParseRequest(Bytes(WithInvalidUtf8(r)), &out);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(s.message(), HasSubstr(c.field));
  }
}

TEST(ParseRequestTest, MalformedBytesAreInvalidArgument) {
  tandem::v1::GenerateRequest out;
  for (const std::string& bad : {std::string("\xff\xff\xff\xff"), std::string("\x12\x7f", 2),
                                 std::string("\x0a\x05hi", 4)}) {
    const absl::Status s = ParseRequest(Bytes(bad), &out);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("not a valid tandem.v1.GenerateRequest"));
  }
}

TEST(ParseRequestTest, AnswersSerializeBackToTheMessage) {
  tandem::v1::GenerateResponse response;
  response.set_text("answer");
  grpc::ByteBuffer bytes;
  SerializeResponse(response, &bytes);
  tandem::v1::GenerateResponse back;
  ASSERT_TRUE(ParseRequest(bytes, &back).ok());
  EXPECT_EQ(back.text(), "answer");
}

}  // namespace
}  // namespace tandem
