// Operations over several registered spans on a real device (rxe0 in the Soft-RoCE guest): a header and a
// payload in two registered buffers go out as one message, a receive or a read scatters into several, and
// more spans than the queue pair takes are refused before posting, the queue pair staying healthy.
#include <coverbs/queue_pair.hpp>

#include "fixtures/completion.hpp"
#include "fixtures/rxe_pair.hpp"
#include "fixtures/test_buffer.hpp"

#include <array>
#include <span>
#include <string>
#include <vector>

namespace cv = coverbs;
using test::completion;
using test::rc_pair;
using test::test_buffer;

namespace {
cv::queue_pair_options sge(std::uint32_t n) {
  cv::queue_pair_options o;
  o.max_send_sge = o.max_recv_sge = n;
  return o;
}
}  // namespace

TEST_CASE("a header and a payload in two registered buffers arrive as one message, byte-exact", "[qp][sg][send]") {
  rc_pair p(sge(2));
  test_buffer header(p.pd, 64), payload(p.pd, 8192), in(p.pd, 16384);
  for (std::size_t i = 0; i < header.bytes.size(); ++i) header.bytes[i] = std::byte('A' + i % 26);
  for (std::size_t i = 0; i < payload.bytes.size(); ++i) payload.bytes[i] = std::byte(i * 7 % 251);
  completion<cv::received> r;
  p.b.async_recv(in.span(), r.handler());
  completion<std::size_t> s;
  p.a.async_send(std::array{header.span(0, 24), payload.span(0, 5000)}, s.handler());
  REQUIRE(p.run_until([&] { return r.done() && s.done(); }));
  REQUIRE_FALSE(*s.ec);
  CHECK(s.value == 5024);
  REQUIRE_FALSE(*r.ec);
  CHECK(r.value.bytes == 5024);
  CHECK(in.str(0, 24) == header.str(0, 24));
  CHECK(in.str(24, 5000) == payload.str(0, 5000));
  CHECK(p.a.error() == cv::error_code{});
}

TEST_CASE("a receive scattered into two spans fills them in order; send_with_imm gathers from a vector",
          "[qp][sg][recv]") {
  rc_pair p(sge(2));
  test_buffer out(p.pd, 4096), head(p.pd, 4096), body(p.pd, 4096);
  for (std::size_t i = 0; i < out.bytes.size(); ++i) out.bytes[i] = std::byte('a' + i % 26);
  completion<cv::received> r;
  p.b.async_recv(std::array{head.span(0, 16), body.span(0, 2000)}, r.handler());
  completion<std::size_t> s;
  const std::vector<cv::registered_span> parts{out.span(0, 10), out.span(10, 990)};
  p.a.async_send_with_imm(parts, 0xBEEF, s.handler());
  REQUIRE(p.run_until([&] { return r.done() && s.done(); }));
  REQUIRE_FALSE(*s.ec);
  CHECK(s.value == 1000);
  REQUIRE_FALSE(*r.ec);
  CHECK(r.value.bytes == 1000);
  REQUIRE(r.value.imm);
  CHECK(*r.value.imm == 0xBEEFu);
  CHECK(head.str(0, 16) == out.str(0, 16));
  CHECK(body.str(0, 984) == out.str(16, 984));
}

TEST_CASE("a write gathers several spans into one remote range and a read scatters it back", "[qp][sg][write][read]") {
  rc_pair p(sge(3));
  test_buffer src(p.pd, 4096), target(p.pd, 4096), back(p.pd, 4096);
  for (std::size_t i = 0; i < src.bytes.size(); ++i) src.bytes[i] = std::byte(i % 253);
  completion<std::size_t> w;
  p.a.async_write(std::array{src.span(100, 8), src.span(2000, 500), src.span(0, 92)}, target.key(), w.handler());
  REQUIRE(p.run_until([&] { return w.done(); }));
  REQUIRE_FALSE(*w.ec);
  CHECK(w.value == 600);
  CHECK(target.str(0, 8) == src.str(100, 8));
  CHECK(target.str(8, 500) == src.str(2000, 500));
  CHECK(target.str(508, 92) == src.str(0, 92));
  completion<std::size_t> rd;
  p.a.async_read(std::array{back.span(1000, 300), back.span(0, 300)}, target.key(), rd.handler());
  REQUIRE(p.run_until([&] { return rd.done(); }));
  REQUIRE_FALSE(*rd.ec);
  CHECK(rd.value == 600);
  CHECK(back.str(1000, 300) == target.str(0, 300));
  CHECK(back.str(0, 300) == target.str(300, 300));
}

TEST_CASE("more spans than the queue pair takes are refused before posting; the queue pair stays healthy",
          "[qp][sg][errors]") {
  rc_pair p(sge(2));
  test_buffer out(p.pd, 4096), in(p.pd, 4096);
  const std::array three{out.span(0, 1), out.span(1, 1), out.span(2, 1)};
  completion<std::size_t> s, w;
  completion<cv::received> r;
  p.a.async_send(three, s.handler());
  p.a.async_write(three, in.key(), w.handler());
  p.b.async_recv(std::array{in.span(0, 1), in.span(1, 1), in.span(2, 1)}, r.handler());
  REQUIRE(p.run_until([&] { return s.done() && w.done() && r.done(); }));
  CHECK(*s.ec == cv::errc::too_many_spans);
  CHECK(*w.ec == cv::errc::too_many_spans);
  CHECK(*r.ec == cv::errc::too_many_spans);
  // Nine spans: more than any operation takes, whatever the queue pair allows.
  std::vector<cv::registered_span> nine(9, out.span(0, 1));
  completion<std::size_t> n;
  p.a.async_send(nine, n.handler());
  REQUIRE(p.run_until([&] { return n.done(); }));
  CHECK(*n.ec == cv::errc::too_many_spans);
  // Healthy: a two-span send still arrives.
  out.fill('h');
  completion<cv::received> r2;
  p.b.async_recv(in.span(), r2.handler());
  completion<std::size_t> s2;
  p.a.async_send(std::array{out.span(0, 3), out.span(3, 4)}, s2.handler());
  REQUIRE(p.run_until([&] { return r2.done() && s2.done(); }));
  CHECK_FALSE(*s2.ec);
  CHECK_FALSE(*r2.ec);
  CHECK(r2.value.bytes == 7);
  CHECK(p.a.error() == cv::error_code{});
  CHECK(p.b.error() == cv::error_code{});
}

TEST_CASE("span lengths whose sum wraps around are refused as too long, not posted; empty spans add nothing",
          "[qp][sg][errors]") {
  rc_pair p(sge(3));
  test_buffer out(p.pd, 4096), in(p.pd, 4096);
  // Two spans a careless or hostile caller made up: 2^63 + 2^31 and 2^63 - 2^31 bytes sum to 0 in size_t.
  const std::size_t half = std::size_t{1} << 63, two_gib = std::size_t{1} << 31;
  const cv::registered_span big{std::span<std::byte>(out.bytes.data(), half + two_gib), out.span().lkey};
  const cv::registered_span big2{std::span<std::byte>(out.bytes.data(), half - two_gib), out.span().lkey};
  completion<std::size_t> w, s;
  completion<cv::received> r;
  p.a.async_write(std::array{big, big2}, in.key(), w.handler());
  p.a.async_send(std::array{big, big2}, s.handler());
  p.b.async_recv(std::array{big, big2}, r.handler());
  REQUIRE(p.run_until([&] { return w.done() && s.done() && r.done(); }));
  CHECK(*w.ec == cv::errc::message_too_long);
  CHECK(*s.ec == cv::errc::message_too_long);
  CHECK(*r.ec == cv::errc::message_too_long);
  // An empty span between two others: the message is the other two, byte-exact.
  for (std::size_t i = 0; i < out.bytes.size(); ++i) out.bytes[i] = std::byte('k' + i % 7);
  completion<cv::received> r2;
  p.b.async_recv(in.span(), r2.handler());
  completion<std::size_t> s2;
  p.a.async_send(std::array{out.span(0, 10), out.span(10, 0), out.span(100, 20)}, s2.handler());
  REQUIRE(p.run_until([&] { return r2.done() && s2.done(); }));
  REQUIRE_FALSE(*s2.ec);
  CHECK(s2.value == 30);
  REQUIRE_FALSE(*r2.ec);
  CHECK(r2.value.bytes == 30);
  CHECK(in.str(0, 10) == out.str(0, 10));
  CHECK(in.str(10, 20) == out.str(100, 20));
  CHECK(p.a.error() == cv::error_code{});
  CHECK(p.b.error() == cv::error_code{});
}
