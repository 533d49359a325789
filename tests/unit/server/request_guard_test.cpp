// request_guard.h: which Host names, browser origins and Authorization headers reach the API.
#include "server/request_guard.h"

#include <gtest/gtest.h>

namespace leoam::server {
namespace {

TEST(RequestGuard, HostNamesLoseTheirPortAndCase) {
  EXPECT_EQ(host_name("Example.COM:8080"), "example.com");
  EXPECT_EQ(host_name("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(host_name("[::1]:8080"), "::1");
  EXPECT_EQ(host_name("::1"), "::1");
}

TEST(RequestGuard, HostsOfTheBoundAddressLoopbackAndTheList) {
  const RequestGuardOptions loopback{"127.0.0.1", {"My.Box"}, "", ""};
  EXPECT_TRUE(host_allowed(loopback, ""));  // HTTP/1.0
  EXPECT_TRUE(host_allowed(loopback, "127.0.0.1:8080"));
  EXPECT_TRUE(host_allowed(loopback, "localhost:8080"));
  EXPECT_TRUE(host_allowed(loopback, "[::1]:8080"));
  EXPECT_TRUE(host_allowed(loopback, "my.box"));
  EXPECT_FALSE(host_allowed(loopback, "evil.example"));  // a rebinding name pointed at 127.0.0.1
  EXPECT_FALSE(host_allowed(loopback, "10.0.0.5"));
  EXPECT_FALSE(host_allowed(loopback, "127.0.0.1.nip.io"));  // a name, however it reads

  const RequestGuardOptions lan{"192.168.1.10", {}, "", ""};
  EXPECT_TRUE(host_allowed(lan, "192.168.1.10:8080"));
  EXPECT_FALSE(host_allowed(lan, "localhost"));  // not listening there
  EXPECT_FALSE(host_allowed(lan, "llm.example"));

  const RequestGuardOptions any{"0.0.0.0", {}, "", ""};
  EXPECT_TRUE(host_allowed(any, "10.0.0.5:8080"));  // an address: no DNS to rebind
  EXPECT_TRUE(host_allowed(any, "[fe80::1]:8080"));
  EXPECT_TRUE(host_allowed(any, "localhost"));
  EXPECT_FALSE(host_allowed(any, "evil.example"));
  EXPECT_FALSE(host_allowed(any, "1.2.3.4.evil.example"));

  const RequestGuardOptions star{"127.0.0.1", {"*"}, "", ""};
  EXPECT_TRUE(host_allowed(star, "anything.example"));
}

TEST(RequestGuard, OriginsAreTheServersPageOrTheCorsOrigin) {
  const RequestGuardOptions none{"127.0.0.1", {}, "", ""};
  EXPECT_EQ(check_origin(none, "", "127.0.0.1:8080"), OriginVerdict::kNone);
  EXPECT_EQ(check_origin(none, "http://127.0.0.1:8080", "127.0.0.1:8080"), OriginVerdict::kSameOrigin);
  EXPECT_EQ(check_origin(none, "http://127.0.0.1:9090", "127.0.0.1:8080"), OriginVerdict::kRefused);
  EXPECT_EQ(check_origin(none, "https://evil.example", "127.0.0.1:8080"), OriginVerdict::kRefused);
  EXPECT_EQ(check_origin(none, "null", "127.0.0.1:8080"), OriginVerdict::kRefused);  // a sandboxed page or a file
  const RequestGuardOptions app{"127.0.0.1", {}, "https://app.example", ""};
  EXPECT_EQ(check_origin(app, "https://APP.example", "127.0.0.1:8080"), OriginVerdict::kCors);
  EXPECT_EQ(check_origin(app, "https://app.example.evil", "127.0.0.1:8080"), OriginVerdict::kRefused);
  const RequestGuardOptions star{"127.0.0.1", {}, "*", ""};
  EXPECT_EQ(check_origin(star, "https://anyone.example", "127.0.0.1:8080"), OriginVerdict::kCors);
}

TEST(RequestGuard, BearerInAnyCase) {
  EXPECT_TRUE(bearer_matches("Bearer sesame", "sesame"));
  EXPECT_TRUE(bearer_matches("bearer sesame", "sesame"));
  EXPECT_TRUE(bearer_matches("BEARER  sesame", "sesame"));
  EXPECT_FALSE(bearer_matches("Bearer sesam", "sesame"));
  EXPECT_FALSE(bearer_matches("Basic sesame", "sesame"));
  EXPECT_FALSE(bearer_matches("sesame", "sesame"));
  EXPECT_FALSE(bearer_matches("Bearer ", ""));
}

}  // namespace
}  // namespace leoam::server
