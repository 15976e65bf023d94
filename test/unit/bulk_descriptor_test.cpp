// Bulk descriptors on the wire, without a device (bulk.hpp): the documented layout, what a callee refuses.
#include <coverbs/bulk.hpp>

#include <catch2/catch.hpp>

#include <vector>

namespace cv = coverbs;

TEST_CASE("a bulk descriptor survives encoding, byte for byte in the documented layout", "[bulk]") {
  const cv::bulk_descriptor d{{0x1122334455667788, 1 << 20, 0xA1B2C3D4}, cv::access::remote_read};
  const auto wire = d.encode();
  static_assert(wire.size() == 28);
  CHECK(wire[0] == std::byte{'C'});
  CHECK(wire[3] == std::byte{'K'});
  CHECK(wire[4] == std::byte{static_cast<unsigned char>(IBV_ACCESS_REMOTE_READ)});
  CHECK(wire[8] == std::byte{0x88});  // little-endian
  CHECK(wire[15] == std::byte{0x11});
  CHECK(wire[18] == std::byte{0x10});  // 1 MiB
  CHECK(wire[24] == std::byte{0xD4});
  std::vector<std::byte> request(wire.begin(), wire.end());
  request.push_back(std::byte{42});
  const cv::bulk_request r = cv::parse_bulk_request(request);
  CHECK(r.descriptor == d);
  REQUIRE(r.payload.size() == 1);
  CHECK(r.payload[0] == std::byte{42});
}

TEST_CASE("a message that does not start with a bulk descriptor is refused with bad_bulk_descriptor, naming why",
          "[bulk]") {
  const auto wire = cv::bulk_descriptor{{1, 2, 3}, cv::access::remote_write}.encode();
  std::vector<std::byte> short_one(wire.begin(), wire.end() - 1);
  cv::error_code ec;
  cv::parse_bulk_request(short_one, ec);
  CHECK(ec == cv::errc::bad_bulk_descriptor);
  CHECK(ec == boost::system::errc::invalid_argument);
  CHECK_THROWS_WITH(cv::parse_bulk_request(short_one), Catch::Contains("27 bytes is shorter"));
  std::vector<std::byte> bad_magic(wire.begin(), wire.end());
  bad_magic[0] = std::byte{'X'};
  CHECK_THROWS_WITH(cv::parse_bulk_request(bad_magic), Catch::Contains("magic"));
  std::vector<std::byte> bad_rights(wire.begin(), wire.end());
  bad_rights[4] = std::byte{static_cast<unsigned char>(IBV_ACCESS_REMOTE_ATOMIC)};
  CHECK_THROWS_WITH(cv::parse_bulk_request(bad_rights), Catch::Contains("remote_atomic"));
  CHECK(cv::error_code(cv::errc::bulk_too_large) == boost::system::errc::message_size);
  CHECK(cv::error_code(cv::errc::bulk_too_large).message().find("local span") != std::string::npos);
}

TEST_CASE("a descriptor whose range passes the end of the address space is refused before posting", "[bulk]") {
  const std::uint64_t top = ~std::uint64_t{0};
  const cv::bulk_descriptor wraps{{top - 4095, 8192, 7}, cv::access::remote_read};
  CHECK(cv::detail::check_bulk(wraps, cv::access::remote_read, 8192, 1 << 20) == cv::errc::bad_bulk_descriptor);
  const cv::bulk_descriptor last_page{{top - 4095, 4096, 7}, cv::access::remote_read};  // ends at the last byte
  CHECK_FALSE(cv::detail::check_bulk(last_page, cv::access::remote_read, 4096, 1 << 20));
  const cv::bulk_descriptor empty{{top, 0, 7}, cv::access::remote_read};
  CHECK_FALSE(cv::detail::check_bulk(empty, cv::access::remote_read, 0, 1 << 20));
}
