// The message endpoint's wire header and credit accounting, and what an inbound_request carries, without a
// device (message_header.hpp, detail/credit_ledger.hpp, inbound_request.hpp).
#include <coverbs/detail/credit_ledger.hpp>
#include <coverbs/inbound_request.hpp>
#include <coverbs/message_header.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <vector>

namespace cv = coverbs;
using cv::detail::credit_ledger;

namespace {

std::vector<std::byte> message(const cv::message_header& h, std::size_t payload) {
  std::vector<std::byte> m(cv::message_header::size + payload, std::byte{0x77});
  cv::encode_header(h, std::span<std::byte, cv::message_header::size>(m.data(), cv::message_header::size));
  return m;
}

}  // namespace

TEST_CASE("a header survives encoding, byte for byte in the documented layout", "[messaging][header]") {
  cv::message_header h;
  h.type = cv::message_type::reply;
  h.length = 3;
  h.correlation_id = 0x0102030405060708;
  h.data_credits = 0x1234;
  h.control_credits = 2;
  h.slot_size = 0x00010400;
  const auto m = message(h, 3);
  CHECK(m[0] == std::byte{0xCB});
  CHECK(m[1] == std::byte{2});
  CHECK(m[2] == std::byte{3});
  CHECK(m[4] == std::byte{3});
  CHECK(m[8] == std::byte{0x08});   // little-endian
  CHECK(m[15] == std::byte{0x01});
  CHECK(m[16] == std::byte{0x34});
  CHECK(m[17] == std::byte{0x12});
  CHECK(m[18] == std::byte{2});
  CHECK(m[20] == std::byte{0x00});  // the sender's slot size, little-endian
  CHECK(m[21] == std::byte{0x04});
  CHECK(m[22] == std::byte{0x01});
  CHECK(m[23] == std::byte{0x00});
  cv::message_header d;
  REQUIRE(cv::decode_header(m, 4096, d).empty());
  CHECK(d.type == h.type);
  CHECK(d.length == 3);
  CHECK(d.correlation_id == h.correlation_id);
  CHECK(d.data_credits == 0x1234);
  CHECK(d.control_credits == 2);
  CHECK(d.slot_size == 0x00010400);
}

TEST_CASE("decoding refuses every malformed header and says what was wrong", "[messaging][header]") {
  cv::message_header h;
  h.length = 10;
  h.slot_size = 4096;
  cv::message_header out;
  SECTION("short") {
    const std::vector<std::byte> m(10);
    CHECK(cv::decode_header(m, 4096, out).find("shorter than the 24-byte header") != std::string::npos);
  }
  SECTION("magic") {
    auto m = message(h, 10);
    m[0] = std::byte{0x41};
    CHECK(cv::decode_header(m, 4096, out).find("bad magic 0x41") != std::string::npos);
  }
  SECTION("version") {
    auto m = message(h, 10);
    m[1] = std::byte{1};  // version 1 had no slot size
    CHECK(cv::decode_header(m, 4096, out) == "protocol version 1 (this side speaks version 2)");
  }
  SECTION("type") {
    auto m = message(h, 10);
    m[2] = std::byte{9};
    CHECK(cv::decode_header(m, 4096, out).find("unknown message type 9") != std::string::npos);
  }
  SECTION("reserved") {
    auto m = message(h, 10);
    m[3] = std::byte{1};
    CHECK(cv::decode_header(m, 4096, out).find("reserved") != std::string::npos);
  }
  SECTION("no slot size") {
    h.slot_size = 0;
    CHECK(cv::decode_header(message(h, 10), 4096, out).find("slot size is 0") != std::string::npos);
  }
  SECTION("above the slot") {
    h.length = 5000;
    CHECK(cv::decode_header(message(h, 0), 4096, out) == "payload length 5000 is above the slot size 4096");
  }
  SECTION("not what arrived") {
    CHECK(cv::decode_header(message(h, 9), 4096, out) ==
          "payload length 10 differs from the 9 bytes that arrived after the header");
  }
  SECTION("a credit message with a payload") {
    h.type = cv::message_type::credit;
    CHECK(cv::decode_header(message(h, 10), 4096, out) == "a credit message carries a payload");
  }
}

TEST_CASE("credits: a sender holds only what the peer reported; arrivals beyond them are overruns",
          "[messaging][credits]") {
  credit_ledger a(8), b(8);  // two sides with 8 data receives each
  CHECK(a.data_credits() == 0);
  CHECK(a.control_credits() == credit_ledger::control_slots);
  CHECK_FALSE(a.take_data());
  // b's first report grants its 8 receives.
  REQUIRE(b.update_due(false));
  const auto grant = b.take_report();
  CHECK(grant.data == 8);
  CHECK(b.peer_data_credits() == 8);
  REQUIRE(a.returned(grant.data, grant.control).empty());
  for (int i = 0; i < 8; ++i) {
    REQUIRE(a.take_data());
    REQUIRE(b.arrived(false).empty());
  }
  CHECK_FALSE(a.take_data());
  CHECK(b.arrived(false).find("no data credit") != std::string::npos);  // a ninth message: overrun
}

TEST_CASE("credits: an update is due at half the receives, or when the peer has none left",
          "[messaging][credits]") {
  credit_ledger b(8);
  b.take_report();
  for (int i = 0; i < 7; ++i) REQUIRE(b.arrived(false).empty());
  b.reposted(false);
  b.reposted(false);
  b.reposted(false);
  CHECK_FALSE(b.update_due(false));  // 3 of 8 to return, and the peer still holds 1
  b.reposted(false);
  CHECK(b.update_due(false));  // half
  b.take_report();
  CHECK_FALSE(b.update_due(false));
  for (int i = 0; i < 5; ++i) REQUIRE(b.arrived(false).empty());
  CHECK(b.peer_data_credits() == 0);
  b.reposted(false);
  CHECK(b.update_due(false));  // one to return, and the peer has none
}

TEST_CASE("credits: control credits come back in headers, and never more than exist", "[messaging][credits]") {
  credit_ledger a(4), b(4);
  (void)b.take_report();  // the first grant: nothing is owed now
  CHECK_FALSE(b.update_due(true));
  for (std::uint32_t i = 0; i < credit_ledger::control_slots; ++i) {
    REQUIRE(a.take_control());
    REQUIRE(b.arrived(true).empty());
    b.reposted(true);
  }
  CHECK_FALSE(a.take_control());
  CHECK(b.arrived(true).find("no control credit") != std::string::npos);
  // b holds all of a's control credits: when b waits for data credits it owes them back (not otherwise).
  CHECK_FALSE(b.update_due(false));
  CHECK(b.update_due(true));
  const auto r = b.take_report();
  CHECK(r.control == credit_ledger::control_slots);
  REQUIRE(a.returned(0, r.control).empty());
  CHECK(a.control_credits() == credit_ledger::control_slots);
  CHECK_FALSE(a.returned(0, 1).empty());  // more than exist: a protocol violation
  // Data credits: no endpoint has more than 65535 receive slots, so more returned in all is a lie.
  REQUIRE(a.returned(0xFFFF, 0).empty());
  CHECK(a.returned(1, 0).find("at most 65535") != std::string::npos);
}

TEST_CASE("a request's correlation id moves with it: the moved-from request holds no call", "[messaging][request]") {
  cv::inbound_request a(cv::inbound_message(), 0x0000'0001'0000'0005);
  cv::inbound_request b(std::move(a));
  CHECK(b.correlation_id() == 0x0000'0001'0000'0005);
  CHECK(a.correlation_id() == 0);  // async_reply refuses it (invalid_argument) before posting
  cv::inbound_request c;
  c = std::move(b);
  CHECK(c.correlation_id() == 0x0000'0001'0000'0005);
  CHECK(b.correlation_id() == 0);
}
