// The message endpoint natively on the software verbs device: the set of requests received and not answered
// (lib/messaging/id_set.hpp) against a reference, many requests held and answered out of order, one reply per
// request, and a peer that repeats a correlation id while the first request is not answered.
#include "fixtures/soft_pair.hpp"
#include "messaging/header_codec.hpp"
#include "messaging/id_set.hpp"

#include <coverbs/message_endpoint.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <array>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace cv = coverbs;
namespace asio = boost::asio;

namespace {

template <class Pred>
bool run_until(asio::io_context& io, Pred done) {
  for (int i = 0; i < 1'000'000 && !done(); ++i)
    if (io.run_one() == 0) break;
  return done();
}

/// An endpoint on queue pair b of a software pair, and a hostile peer on a: raw sends of headers written by hand.
struct raw_peer {
  asio::io_context io;
  soft_verbs::soft_pair rig{io, 64, 4096};
  cv::message_endpoint ep{rig.pd, rig.b, options()};
  int received = 0;

  raw_peer() {
    for (int i = 0; i < 8; ++i)  // room for what the endpoint sends: credit messages, replies
      rig.a.async_recv(rig.local_span(4096).subspan(2048 + 256 * i, 256),
                       [this](cv::error_code ec, cv::received) { received += !ec; });
    REQUIRE(run_until(io, [&] { return received >= 1; }));  // its first credit message: 4 data credits
  }
  /// Sends `h` (and as many payload bytes as it says) from offset `at` of the peer's buffer.
  void send(std::size_t at, const cv::message_header& h) {
    cv::encode_header(h, std::span<std::byte, cv::message_header::size>(rig.local.data() + at, cv::message_header::size));
    rig.a.async_send(rig.local_span(4096).subspan(at, cv::message_header::size + h.length),
                     [](cv::error_code ec, std::size_t) { REQUIRE_FALSE(ec); });
  }
  static cv::message_header request(std::uint64_t id) {
    cv::message_header d;
    d.type = cv::message_type::request;
    d.slot_size = 64;
    d.correlation_id = id;
    return d;
  }

private:
  static cv::message_options options() {
    cv::message_options o;
    o.slot_size = 64;
    o.recv_slots = o.send_slots = 4;
    return o;
  }
};

}  // namespace

TEST_CASE("the set of unanswered ids agrees with an ordered set through inserts, erases and growth",
          "[messaging][id_set]") {
  cv::detail::id_set s;
  std::set<std::uint64_t> reference;
  std::mt19937_64 rng(12345);
  // Ids as a call table makes them ((generation << 32) | index: dense and structured), and arbitrary ones.
  const auto pick = [&] {
    const std::uint64_t r = rng();
    return (r & 1) ? ((((r >> 8) & 3) + 1) << 32) | ((r >> 16) & 1023) : (r | 1);
  };
  for (int i = 0; i < 200'000; ++i) {
    const std::uint64_t id = pick();
    if (rng() % 3 == 0 || reference.size() > 3000) {
      // Erase mostly what is there (the backward shift), sometimes what is not.
      const std::uint64_t victim =
          (!reference.empty() && rng() % 4) ? *std::next(reference.begin(), rng() % std::min<std::size_t>(reference.size(), 64))
                                            : id;
      CHECK(s.erase(victim) == (reference.erase(victim) == 1));
    } else {
      CHECK(s.insert(id) == reference.insert(id).second);
    }
    REQUIRE(s.size() == reference.size());
  }
  for (std::uint64_t id : reference)
    CHECK(s.contains(id));
  CHECK_FALSE(s.contains(0));
  CHECK_FALSE(s.erase(0));
  s.clear();
  CHECK(s.size() == 0);
  for (std::uint64_t id : reference)
    CHECK_FALSE(s.contains(id));
  CHECK(s.insert(42));
  CHECK_FALSE(s.insert(42));
}

TEST_CASE("the inline header decoding accepts exactly what decode_header accepts", "[messaging][header]") {
  cv::message_header h;
  h.type = cv::message_type::reply;
  h.length = 5;
  h.correlation_id = 0x1122334455667788ull;
  h.data_credits = 513;
  h.control_credits = 2;
  h.slot_size = 64;
  std::array<std::byte, cv::message_header::size + 5> bytes{};
  cv::encode_header(h, std::span<std::byte, cv::message_header::size>(bytes.data(), cv::message_header::size));
  std::array<std::byte, cv::message_header::size> inline_encoded{};
  cv::detail::encode_header_inline(h, inline_encoded.data());
  CHECK(std::equal(inline_encoded.begin(), inline_encoded.end(), bytes.begin()));
  std::mt19937 rng(7);
  for (int i = 0; i < 20'000; ++i) {
    auto m = bytes;
    // One or two bytes of the header changed, or the length received, or the slot size.
    for (int k = 0; k < 1 + i % 2; ++k)
      m[rng() % cv::message_header::size] = static_cast<std::byte>(rng() % 8 == 0 ? 0 : rng());
    const std::size_t received = i % 5 == 0 ? rng() % m.size() : m.size();
    const std::size_t slot_size = i % 7 == 0 ? rng() % 8 : 64;
    cv::message_header slow, fast;
    const bool slow_ok = cv::decode_header({m.data(), received}, slot_size, slow).empty();
    const bool fast_ok = cv::detail::decode_header_inline(m.data(), received, slot_size, fast);
    REQUIRE(slow_ok == fast_ok);
    if (slow_ok) {
      CHECK(fast.type == slow.type);
      CHECK(fast.length == slow.length);
      CHECK(fast.correlation_id == slow.correlation_id);
      CHECK(fast.data_credits == slow.data_credits);
      CHECK(fast.control_credits == slow.control_credits);
      CHECK(fast.slot_size == slow.slot_size);
    }
  }
}

TEST_CASE("requests held, released and answered out of order; each request takes one reply", "[messaging][calls]") {
  asio::io_context io;
  soft_verbs::soft_pair rig(io, 128, 64);
  cv::message_options o;
  o.slot_size = 64;
  o.recv_slots = o.send_slots = 16;
  cv::message_endpoint client(rig.pd, rig.a, o), server(rig.pd, rig.b, o);
  constexpr int calls = 300;  // far more than the set's first table (16 places): it grows
  std::vector<std::optional<std::string>> replies(calls);
  // The bytes of a call or a reply are copied when it is posted, which may be later: they live until then.
  std::vector<std::string> questions, answers;
  for (int i = 0; i < calls; ++i) {
    questions.push_back("q" + std::to_string(i));
    answers.push_back("a" + std::to_string(i));
  }
  for (int i = 0; i < calls; ++i) {
    client.async_call(asio::buffer(questions[i]), [&replies, i](cv::error_code ec, cv::inbound_message m) {
      REQUIRE_FALSE(ec);
      replies[i] = std::string(m.str());
    });
  }
  std::vector<std::pair<std::string, cv::inbound_request>> held;
  std::function<void()> receive = [&] {
    server.async_receive_request([&](cv::error_code ec, cv::inbound_request r) {
      REQUIRE_FALSE(ec);
      std::string q(r.str());
      r.release();  // the slot goes back; the id stays, so the request can still be answered
      held.emplace_back(std::move(q), std::move(r));
      if (held.size() < calls) receive();
    });
  };
  receive();
  REQUIRE(run_until(io, [&] { return held.size() == calls; }));
  CHECK(server.statistics().messages_received == calls);
  std::shuffle(held.begin(), held.end(), std::mt19937(99));
  int answered = 0;
  for (auto& [q, r] : held) {
    server.async_reply(r, asio::buffer(answers[std::stoi(q.substr(1))]), [&answered](cv::error_code ec) {
      REQUIRE_FALSE(ec);
      ++answered;
    });
  }
  REQUIRE(run_until(io, [&] { return answered == calls && std::all_of(replies.begin(), replies.end(), [](auto& r) { return r.has_value(); }); }));
  for (int i = 0; i < calls; ++i)
    CHECK(*replies[i] == "a" + std::to_string(i));
  // A second reply to a request answered already is refused, and the endpoint stays usable.
  std::optional<cv::error_code> again;
  server.async_reply(held[17].second, asio::buffer("x", 1), [&](cv::error_code ec) { again = ec; });
  REQUIRE(run_until(io, [&] { return again.has_value(); }));
  CHECK(*again == boost::system::errc::invalid_argument);
  CHECK(server.diagnostic().find("answered already") != std::string::npos);
  CHECK_FALSE(server.error());
}

TEST_CASE("a peer that repeats a correlation id not answered yet fails the endpoint", "[messaging][hostile]") {
  raw_peer p;
  std::vector<cv::inbound_request> requests;
  std::optional<cv::error_code> last;
  std::function<void()> receive = [&] {
    p.ep.async_receive_request([&](cv::error_code ec, cv::inbound_request r) {
      if (ec) return void(last = ec);
      requests.push_back(std::move(r));
      receive();
    });
  };
  receive();
  p.send(0, raw_peer::request((std::uint64_t{1} << 32) | 7));
  p.send(256, raw_peer::request((std::uint64_t{1} << 32) | 8));  // another id: fine
  REQUIRE(run_until(p.io, [&] { return requests.size() == 2; }));
  CHECK_FALSE(p.ep.error());
  p.send(512, raw_peer::request((std::uint64_t{1} << 32) | 7));  // the first id again, not answered
  REQUIRE(run_until(p.io, [&] { return last.has_value(); }));
  CHECK(*last == cv::errc::protocol_violation);
  CHECK(p.ep.error() == cv::errc::protocol_violation);
  INFO(p.ep.diagnostic());
  CHECK(p.ep.diagnostic().find("a second request with correlation id 4294967303") != std::string::npos);
}

TEST_CASE("an id answered may come again in a later request", "[messaging][hostile]") {
  raw_peer p;
  cv::message_header grant;  // the endpoint's replies need data credits of the peer's
  grant.type = cv::message_type::credit;
  grant.data_credits = 4;
  grant.slot_size = 64;
  p.send(1024, grant);
  for (int round = 0; round < 2; ++round) {
    std::optional<cv::inbound_request> request;
    p.ep.async_receive_request([&](cv::error_code ec, cv::inbound_request r) {
      REQUIRE_FALSE(ec);
      request = std::move(r);
    });
    p.send(256 * round, raw_peer::request(99));
    REQUIRE(run_until(p.io, [&] { return request.has_value(); }));
    CHECK(request->correlation_id() == 99);
    bool answered = false;
    p.ep.async_reply(*request, asio::buffer("r", 1), [&](cv::error_code ec) { answered = !ec; });
    REQUIRE(run_until(p.io, [&] { return answered; }));
    CHECK_FALSE(p.ep.error());
  }
}

TEST_CASE("a message released on another thread, or after its endpoint is gone, reposts or drops its slot",
          "[messaging][lifetime]") {
  asio::io_context io;
  soft_verbs::soft_pair rig(io, 64, 64);
  cv::message_options o;
  o.slot_size = 64;
  o.recv_slots = o.send_slots = 4;
  cv::message_endpoint client(rig.pd, rig.a, o);
  std::optional<cv::message_endpoint> server(std::in_place, rig.pd, rig.b, o);
  std::vector<cv::inbound_request> held;
  const auto take = [&](int n) {
    for (int i = 0; i < n; ++i)
      server->async_receive_request([&](cv::error_code ec, cv::inbound_request r) {
        REQUIRE_FALSE(ec);
        held.push_back(std::move(r));
      });
    return run_until(io, [&] { return held.size() == static_cast<std::size_t>(n); });
  };
  int replies = 0;
  for (int i = 0; i < 8; ++i)  // twice the server's slots: the second four wait for the first four's release
    client.async_call(asio::buffer("q", 1), [&](cv::error_code ec, cv::inbound_message) { replies += !ec; });
  REQUIRE(take(4));
  // Released on another thread: each repost is dispatched to the loop, and the waiting calls come in.
  std::thread([&] { held.clear(); }).join();
  REQUIRE(take(4));
  for (auto& r : held)
    server->async_reply(r, asio::buffer("a", 1), [](cv::error_code ec) { REQUIRE_FALSE(ec); });
  REQUIRE(run_until(io, [&] { return replies == 4; }));
  // The endpoint goes while its requests are held: releasing them afterwards posts nothing.
  server.reset();
  held.clear();
  for (int i = 0; i < 100; ++i)
    io.poll_one();
  CHECK(replies == 4);
}
