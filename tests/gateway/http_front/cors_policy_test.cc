#include "gateway/http_front/cors_policy.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::gateway {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Pair;

std::string HeaderOf(const HttpHeaders& h, const std::string& name) {
  for (const auto& [k, v] : h) {
    if (k == name) return v;
  }
  return "";
}

TEST(CorsPolicyTest, OffByDefaultAndOnlyListedOriginsAreAllowed) {
  EXPECT_FALSE(CorsPolicy().enabled());
  EXPECT_FALSE(CorsPolicy().Allows("https://app.example.com"));
  auto p = CorsPolicy::Create({"https://app.example.com", "http://localhost:5173"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->enabled());
  EXPECT_TRUE(p->Allows("https://app.example.com"));
  EXPECT_TRUE(p->Allows("HTTPS://APP.example.com"));
  EXPECT_TRUE(p->Allows("http://localhost:5173"));
  EXPECT_FALSE(p->Allows("https://app.example.com.evil.net"));
  EXPECT_FALSE(p->Allows("http://app.example.com"));
  EXPECT_FALSE(p->Allows("null"));
  auto any = CorsPolicy::Create({"*"});
  ASSERT_TRUE(any.ok());
  EXPECT_TRUE(any->Allows("https://anything.example"));
  EXPECT_FALSE(any->Allows("not an origin"));
}

TEST(CorsPolicyTest, MalformedOriginsAreAStartUpError) {
  for (const char* bad : {"app.example.com", "https://app.example.com/", "ftp://x", "https://a b",
                          "", "https://x/path"}) {
    auto p = CorsPolicy::Create({bad});
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(p.status().message()), HasSubstr("--http_cors_origins")) << bad;
  }
}

TEST(CorsPolicyTest, PreflightEchoesTheOriginMethodsAndRequestedHeaders) {
  auto p = CorsPolicy::Create({"https://app.example.com"});
  ASSERT_TRUE(p.ok());
  HttpHeaders h;
  p->AddPreflightHeaders("https://app.example.com", "POST, OPTIONS",
                         "authorization, content-type,x-stainless-os", &h);
  EXPECT_THAT(h, Contains(Pair("access-control-allow-origin", "https://app.example.com")));
  EXPECT_THAT(h, Contains(Pair("vary", "Origin")));
  EXPECT_THAT(h, Contains(Pair("access-control-allow-methods", "POST, OPTIONS")));
  EXPECT_EQ(HeaderOf(h, "access-control-allow-headers"),
            "authorization, content-type, x-stainless-os");
  EXPECT_FALSE(HeaderOf(h, "access-control-max-age").empty());
  EXPECT_EQ(HeaderOf(h, "access-control-allow-credentials"), "");
  // A requested header that is not a header name allows none (the browser then refuses).
  HttpHeaders odd;
  p->AddPreflightHeaders("https://app.example.com", "POST", "authorization, bad\r\nx: y", &odd);
  EXPECT_EQ(HeaderOf(odd, "access-control-allow-headers"), "");
  HttpHeaders answer;
  p->AddResponseHeaders("https://app.example.com", &answer);
  EXPECT_THAT(HeaderOf(answer, "access-control-expose-headers"), HasSubstr("x-tandem-model"));
}

}  // namespace
}  // namespace tandem::gateway
