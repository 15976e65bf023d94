#include <coverbs/access.hpp>

#include <catch2/catch.hpp>

namespace cv = coverbs;  // spelled cv::access: a global `using coverbs::access` clashes with POSIX access(2)

TEST_CASE("access values equal the verbs flags", "[access]") {
  STATIC_REQUIRE(coverbs::to_verbs(cv::access::local_write) == IBV_ACCESS_LOCAL_WRITE);
  STATIC_REQUIRE(coverbs::to_verbs(cv::access::remote_write) == IBV_ACCESS_REMOTE_WRITE);
  STATIC_REQUIRE(coverbs::to_verbs(cv::access::remote_read) == IBV_ACCESS_REMOTE_READ);
  STATIC_REQUIRE(coverbs::to_verbs(cv::access::remote_atomic) == IBV_ACCESS_REMOTE_ATOMIC);
  STATIC_REQUIRE(coverbs::to_verbs(cv::access::mw_bind) == IBV_ACCESS_MW_BIND);
  STATIC_REQUIRE(coverbs::from_verbs(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND) ==
                 (cv::access::local_write | cv::access::mw_bind));
}

TEST_CASE("access combines and tests like a bitmask", "[access]") {
  cv::access a = cv::access::local_write | cv::access::remote_read;
  CHECK(has(a, cv::access::local_write));
  CHECK(has(a, cv::access::local_write | cv::access::remote_read));
  CHECK_FALSE(has(a, cv::access::remote_write));
  CHECK_FALSE(has(a, cv::access::local_write | cv::access::remote_write));
  a |= cv::access::mw_bind;
  CHECK(has(a, cv::access::mw_bind));
  a &= ~cv::access::local_write;
  CHECK_FALSE(has(a, cv::access::local_write));
  CHECK((a & cv::access::remote_read) == cv::access::remote_read);
  CHECK(has(cv::access::none, cv::access::none));
}

TEST_CASE("access prints its rights by name", "[access]") {
  CHECK(to_string(cv::access::none) == "none");
  CHECK(to_string(cv::access::local_write | cv::access::remote_write) == "local_write|remote_write");
  CHECK(to_string(cv::access::mw_bind | cv::access::remote_atomic) == "remote_atomic|mw_bind");
  CHECK(to_string(static_cast<cv::access>(1u << 30)) == "0x40000000");
}
