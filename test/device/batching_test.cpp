// Doorbell batching and selective signaling on a real device (rxe0 in the Soft-RoCE guest), as queue_pair.hpp
// states the rule: send-queue operations initiated during one dispatch turn reach the device as one list in one
// ibv_post_send, only its last request signaled; one initiated outside a turn is posted at once. Whatever the
// list, every handler runs exactly once, in posting order per queue pair, with the right result; the send
// queue never overruns; an error fails its own request and flushes those behind it; a cancellation of a
// request still in the list aborts it alone.
#include <coverbs/queue_pair.hpp>

#include "fixtures/completion.hpp"
#include "fixtures/rxe_pair.hpp"
#include "fixtures/test_buffer.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace cv = coverbs;
using asio::awaitable;
using asio::use_awaitable;
using namespace boost::asio::experimental::awaitable_operators;
using test::completion;
using test::rc_pair;
using test::test_buffer;

// --- the random mix: several queue pairs on one completion queue, one of them failing on purpose ---

namespace {

constexpr std::size_t slot_bytes = 4096;           // the largest operation of the mix
constexpr std::size_t slots = 48;                  // operations in flight per queue pair (more than some queues hold)
constexpr std::size_t read_area = 2 * slot_bytes;  // a fixed pattern the reads copy from
constexpr std::size_t atomic_words = 4;            // 8-byte targets of the atomics, per queue pair
constexpr std::size_t post_error_operations = 16;  // initiated on the failed queue pair after its error is seen

/// Byte `j` of what operation `seq` of queue pair `conn` carries: a pattern no other operation repeats.
std::byte pattern_byte(std::size_t conn, std::uint64_t seq, std::size_t j) {
  std::uint64_t x = ((seq << 8) | conn) * 0x9E3779B97F4A7C15ull + (j / 8 + 1) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return std::byte(static_cast<unsigned char>(x >> ((j % 8) * 8)));
}

void fill_pattern(std::byte* p, std::size_t n, std::size_t conn, std::uint64_t seq) {
  for (std::size_t j = 0; j < n; ++j)
    p[j] = pattern_byte(conn, seq, j);
}

bool has_pattern(const std::byte* p, std::size_t n, std::size_t conn, std::uint64_t seq) {
  for (std::size_t j = 0; j < n; ++j)
    if (p[j] != pattern_byte(conn, seq, j)) return false;
  return true;
}

enum class kind { write, send, read, fetch_add, compare_swap };

const char* name_of(kind k) {
  switch (k) {
  case kind::write: return "write";
  case kind::send: return "send";
  case kind::read: return "read";
  case kind::fetch_add: return "fetch_add";
  case kind::compare_swap: return "compare_swap";
  }
  return "?";
}

/// One operation of the mix, as its handler needs it.
struct operation {
  std::size_t conn = 0;
  std::uint64_t seq = 0;  // posting order on the queue pair
  kind k = kind::write;
  std::size_t slot = 0;                                   // of the initiator's local buffer
  std::size_t size = 0;                                   // bytes (atomics: 8)
  std::size_t offset = 0;                                 // reads: where in the read area; atomics: which word
  std::uint64_t operand = 0, swap = 0, expected_old = 0;  // atomics: addend or compare, swap, the model's old value
};

/// One connection of the mix: `a` initiates every operation; `b` is its peer, whose memory is the target and on
/// which a receive is posted for each send.
struct connection {
  cv::queue_pair_options options;
  test_buffer local;   // a's: `slots` slots: sources of writes and sends, destinations of reads, atomic results
  test_buffer remote;  // b's: `slots` write targets, then the read area, then the atomic words
  test_buffer inbox;   // b's receives: `slots` slots
  cv::queue_pair a, b;
  std::vector<std::size_t> free_slots, free_inbox;
  std::uint64_t next_seq = 0, next_handled = 0;
  std::vector<std::uint8_t> calls;  // handler runs, by seq
  struct message {
    std::uint64_t seq;
    std::size_t size;
  };
  std::vector<message> messages;       // by receive index: the send that receive takes (both in posting order)
  std::vector<std::uint8_t> rx_calls;  // handler runs, by receive index
  std::size_t rx_handled = 0, rx_next_delivered = 0;
  std::array<std::uint64_t, atomic_words> model{};    // each word after every atomic initiated so far
  std::array<std::uint64_t, atomic_words> applied{};  // each word after every atomic completed so far
  std::array<std::size_t, atomic_words> atomics_in_flight{};
  std::optional<std::uint64_t> bad_seq;  // the operation with the forbidden key
  bool failed = false;                   // its handler ran
  std::size_t after_failure = 0;  // operations initiated since the forbidden one's handler ran (on any queue pair)

  connection(cv::protection_domain& pd, cv::completion_queue& cq, const cv::queue_pair_options& o)
      : options(o), local(pd, slots * slot_bytes), remote(pd, slots * slot_bytes + read_area + atomic_words * 8),
        inbox(pd, slots * slot_bytes), a(pd, cq, o), b(pd, cq, o) {
    cv::connect_pair(a, b);
    for (std::size_t s = 0; s < slots; ++s) {
      free_slots.push_back(s);
      free_inbox.push_back(s);
    }
    for (std::size_t j = 0; j < read_area; ++j)
      remote.bytes[read_base() + j] = std::byte(static_cast<unsigned char>(j * 13 + j / 251));
  }
  static std::size_t read_base() { return slots * slot_bytes; }
  static std::size_t word_offset(std::size_t w) { return slots * slot_bytes + read_area + w * 8; }
  std::byte* local_slot(std::size_t s) { return local.bytes.data() + s * slot_bytes; }
  cv::registered_span local_span(std::size_t s, std::size_t n) const { return local.span(s * slot_bytes, n); }
  /// What operation `seq` must complete with: success before the forbidden one, its own error, flushes after.
  cv::error_code expected_result(std::uint64_t seq) const {
    if (!bad_seq || seq < *bad_seq) return {};
    if (seq == *bad_seq) return cv::wc_errc::rem_access_err;
    return cv::wc_errc::wr_flush_err;
  }
};

std::uint64_t seed_from_environment() {
  if (const char* s = std::getenv("COVERBS_TEST_SEED"); s && *s) return std::strtoull(s, nullptr, 0);
  return std::random_device{}() * 0x100000000ull + std::random_device{}();
}

/// `total` operations over four queue pairs (send-queue depths 32, 4, 128 and 2: lists of 16, 2, 32 and 1
/// request) on one completion queue. They are initiated in bursts from outside a turn (before the loop runs,
/// from posted lambdas and a timer) and from inside one (completion handlers start the next ones); once the
/// mix is past a random point, the next operation of one queue pair uses a key that forbids it.
struct random_mix : test::event_loop {
  cv::device dev = cv::device::open();
  cv::protection_domain pd{dev};
  cv::completion_queue cq{io, dev};
  test_buffer read_only{pd, slot_bytes, cv::access::local_write | cv::access::remote_read};    // no write
  test_buffer write_only{pd, slot_bytes, cv::access::local_write | cv::access::remote_write};  // no read
  std::vector<std::unique_ptr<connection>> conns;
  asio::steady_timer top_up{io};
  std::uint64_t seed;
  std::mt19937_64 rng;
  std::size_t total, issued = 0, handled = 0, rx_posted = 0, rx_handled = 0;
  std::size_t from_handlers = 0, from_outside = 0;
  std::size_t failing, bad_at;  // the queue pair that fails, and after how many operations of the mix
  bool in_handler = false;
  bool failure_seen = false;          // the forbidden operation's handler ran
  std::vector<std::string> problems;  // the first few
  std::size_t problem_count = 0;

  explicit random_mix(std::size_t operations) : seed(seed_from_environment()), rng(seed), total(operations) {
    for (std::uint32_t depth : {32u, 4u, 128u, 2u}) {
      cv::queue_pair_options o;
      o.max_send_wr = depth;
      conns.push_back(std::make_unique<connection>(pd, cq, o));
    }
    failing = uniform(0, conns.size() - 1);
    bad_at = uniform(total * 3 / 10, total * 6 / 10);
  }

  std::uint64_t uniform(std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
  }

  template <class... Parts>
  void problem(const Parts&... parts) {
    if (problem_count++ < 20) {
      std::ostringstream s;
      (s << ... << parts);
      problems.push_back(s.str());
    }
  }

  /// Initiates one operation on `conns[ci]` if the mix wants more and the queue pair has a free slot.
  bool issue(std::size_t ci) {
    connection& c = *conns[ci];
    if (issued >= total || c.free_slots.empty()) return false;
    if (c.failed && c.after_failure >= post_error_operations) return false;  // its flushes are shown
    operation o;
    o.conn = ci;
    o.seq = c.next_seq++;
    o.slot = c.free_slots.back();
    c.free_slots.pop_back();
    c.calls.push_back(0);
    if (failure_seen) ++c.after_failure;
    ++issued;
    ++(in_handler ? from_handlers : from_outside);
    if (ci == failing && !c.bad_seq && issued > bad_at) {
      c.bad_seq = o.seq;
      start_forbidden(c, o);
      return true;
    }
    const std::uint64_t roll = uniform(0, 99);
    o.k = roll < 30   ? kind::write
          : roll < 55 ? kind::send
          : roll < 80 ? kind::read
          : roll < 90 ? kind::fetch_add
                      : kind::compare_swap;
    if (o.k == kind::send && c.free_inbox.empty()) o.k = kind::write;
    o.size = uniform(0, 1) ? uniform(0, 64) : uniform(0, slot_bytes);  // half of them small enough to go inline
    switch (o.k) {
    case kind::write:
      fill_pattern(c.local_slot(o.slot), o.size, ci, o.seq);
      c.a.async_write(c.local_span(o.slot, o.size), c.remote.key().slice(o.slot * slot_bytes, o.size),
                      [this, o](cv::error_code ec, std::size_t n) { finished(o, ec, n); });
      break;
    case kind::send: start_send(c, o); break;
    case kind::read:
      o.offset = uniform(0, read_area - o.size);
      std::memset(c.local_slot(o.slot), 0xEE, o.size);
      c.a.async_read(c.local_span(o.slot, o.size), c.remote.key().slice(c.read_base() + o.offset, o.size),
                     [this, o](cv::error_code ec, std::size_t n) { finished(o, ec, n); });
      break;
    case kind::fetch_add:
    case kind::compare_swap: start_atomic(c, o); break;
    }
    return true;
  }

  void start_send(connection& c, operation& o) {
    fill_pattern(c.local_slot(o.slot), o.size, o.conn, o.seq);
    const std::size_t rx = c.free_inbox.back();
    c.free_inbox.pop_back();
    const std::size_t index = c.messages.size();
    c.messages.push_back({o.seq, o.size});
    c.rx_calls.push_back(0);
    ++rx_posted;
    std::memset(c.inbox.bytes.data() + rx * slot_bytes, 0, slot_bytes);
    // The receive first: it is posted at once (receives are never held back), so the peer has it when the send,
    // perhaps held in this turn's list, arrives; the k-th receive takes the k-th send.
    c.b.async_recv(
        c.inbox.span(rx * slot_bytes, slot_bytes),
        [this, ci = o.conn, rx, index](cv::error_code ec, cv::received r) { delivered(ci, rx, index, ec, r); });
    c.a.async_send(c.local_span(o.slot, o.size), [this, o](cv::error_code ec, std::size_t n) { finished(o, ec, n); });
  }

  void start_atomic(connection& c, operation& o) {
    o.size = 8;
    o.offset = uniform(0, atomic_words - 1);
    std::uint64_t& word = c.model[o.offset];
    o.expected_old = word;
    ++c.atomics_in_flight[o.offset];
    std::memset(c.local_slot(o.slot), 0xA5, 8);
    if (o.k == kind::fetch_add) {
      o.operand = rng();
      word += o.operand;
    } else {
      o.operand = uniform(0, 1) ? word : word + 1;  // half of them swap, half leave the word
      o.swap = rng();
      if (o.operand == word) word = o.swap;
    }
    const cv::remote_key target = c.remote.key().slice(c.word_offset(o.offset), 8);
    auto handler = [this, o](cv::error_code ec, std::uint64_t old) { finished(o, ec, old); };
    if (o.k == kind::fetch_add)
      c.a.async_fetch_add(c.local_span(o.slot, 8), target, o.operand, std::move(handler));
    else
      c.a.async_compare_swap(c.local_span(o.slot, 8), target, o.operand, o.swap, std::move(handler));
  }

  /// The operation with a forbidden key: a write into a region without remote_write, or a read of one without
  /// remote_read (non-empty: a zero-length request checks no key).
  void start_forbidden(connection& c, operation& o) {
    o.size = uniform(1, slot_bytes);
    o.k = uniform(0, 1) ? kind::write : kind::read;
    auto handler = [this, o](cv::error_code ec, std::size_t n) { finished(o, ec, n); };
    if (o.k == kind::write)
      c.a.async_write(c.local_span(o.slot, o.size), read_only.key().slice(0, o.size), std::move(handler));
    else
      c.a.async_read(c.local_span(o.slot, o.size), write_only.key().slice(0, o.size), std::move(handler));
  }

  /// Checked inside every handler: no send queue holds more than its depth.
  void check_send_queues() {
    for (std::size_t ci = 0; ci < conns.size(); ++ci)
      if (conns[ci]->a.sends_outstanding() > conns[ci]->options.max_send_wr)
        problem("queue pair ", ci, ": ", conns[ci]->a.sends_outstanding(), " sends outstanding, depth ",
                conns[ci]->options.max_send_wr);
  }

  void finished(const operation& o, cv::error_code ec, std::uint64_t value) {
    connection& c = *conns[o.conn];
    ++handled;
    if (c.calls[o.seq]++ != 0) problem("queue pair ", o.conn, ": handler of #", o.seq, " ran again");
    if (o.seq != c.next_handled)
      problem("queue pair ", o.conn, ": handler of #", o.seq, " (", name_of(o.k), ") ran when #", c.next_handled,
              " was next in posting order", c.bad_seq ? " (forbidden key at #" : "",
              c.bad_seq ? std::to_string(*c.bad_seq) + ")" : "");
    c.next_handled = std::max(c.next_handled, o.seq + 1);
    check_send_queues();
    const cv::error_code want = c.expected_result(o.seq);
    if (ec != want)
      problem("queue pair ", o.conn, ": #", o.seq, " (", name_of(o.k), ", ", o.size, " B) completed with '",
              ec.message(), "', expected '", want.message(), "'", c.bad_seq ? " (forbidden key at #" : "",
              c.bad_seq ? std::to_string(*c.bad_seq) + ")" : "");
    else if (!ec)
      verify(c, o, value);
    if (o.k == kind::fetch_add || o.k == kind::compare_swap) --c.atomics_in_flight[o.offset];
    if (c.bad_seq == o.seq) c.failed = failure_seen = true;
    c.free_slots.push_back(o.slot);
    react(o.conn);
  }

  void verify(connection& c, const operation& o, std::uint64_t value) {
    switch (o.k) {
    case kind::write:
      if (value != o.size || !has_pattern(c.remote.bytes.data() + o.slot * slot_bytes, o.size, o.conn, o.seq))
        problem("queue pair ", o.conn, ": write #", o.seq, " of ", o.size, " B reported ", value,
                " B; the target holds other bytes");
      break;
    case kind::send:
      if (value != o.size) problem("queue pair ", o.conn, ": send #", o.seq, " of ", o.size, " B reported ", value);
      break;
    case kind::read:
      if (value != o.size ||
          std::memcmp(c.local_slot(o.slot), c.remote.bytes.data() + c.read_base() + o.offset, o.size) != 0)
        problem("queue pair ", o.conn, ": read #", o.seq, " of ", o.size, " B at ", o.offset, " reported ", value,
                " B; the local slot holds other bytes");
      break;
    case kind::fetch_add:
    case kind::compare_swap: {
      std::uint64_t landed;
      std::memcpy(&landed, c.local_slot(o.slot), 8);
      if (value != o.expected_old || landed != value)
        problem("queue pair ", o.conn, ": ", name_of(o.k), " #", o.seq, " on word ", o.offset, " returned ", value,
                " (result buffer ", landed, "), the model says ", o.expected_old);
      std::uint64_t& word = c.applied[o.offset];
      word = o.k == kind::fetch_add ? value + o.operand : value == o.operand ? o.swap : value;
      if (c.atomics_in_flight[o.offset] == 1) {  // the last one on its word so far: the word must show it
        std::uint64_t now;
        std::memcpy(&now, c.remote.bytes.data() + c.word_offset(o.offset), 8);
        if (now != word)
          problem("queue pair ", o.conn, ": after ", name_of(o.k), " #", o.seq, " (old ", value, ", operand ",
                  o.operand, ", swap ", o.swap, ") word ", o.offset, " holds ", now, ", expected ", word);
      }
      break;
    }
    }
  }

  void delivered(std::size_t ci, std::size_t rx, std::size_t index, cv::error_code ec, const cv::received& r) {
    connection& c = *conns[ci];
    ++rx_handled;
    ++c.rx_handled;
    if (c.rx_calls[index]++ != 0) problem("queue pair ", ci, ": receive ", index, " ran again");
    check_send_queues();
    const connection::message m = c.messages[index];
    if (c.expected_result(m.seq)) {
      // Its send comes after the forbidden operation: it is flushed and never reaches the peer, whose queue pair
      // the device moved to the error state too (rxe: a responder's access error is class C).
      if (!ec) problem("queue pair ", ci, ": receive ", index, " took send #", m.seq, ", which was to be flushed");
    } else if (ec) {
      problem("queue pair ", ci, ": receive ", index, " for send #", m.seq, " completed with '", ec.message(), "'");
    } else {
      if (index != c.rx_next_delivered)
        problem("queue pair ", ci, ": receive ", index, " delivered when ", c.rx_next_delivered, " was next");
      c.rx_next_delivered = index + 1;
      if (r.bytes != m.size || !has_pattern(c.inbox.bytes.data() + rx * slot_bytes, m.size, ci, m.seq))
        problem("queue pair ", ci, ": receive ", index, " got ", r.bytes, " B, not send #", m.seq, "'s ", m.size, " B");
    }
    c.free_inbox.push_back(rx);
    react(ci);
  }

  /// What a handler does next: half start one to three operations in its own turn (on its queue pair or
  /// another), a quarter post a lambda that starts up to four outside any turn.
  void react(std::size_t own) {
    const std::uint64_t roll = uniform(0, 99);
    if (roll < 50) {
      in_handler = true;
      for (std::uint64_t n = uniform(1, 3); n > 0; --n)
        issue(roll < 25 ? own : uniform(0, conns.size() - 1));
      in_handler = false;
    } else if (roll < 75) {
      asio::post(io, [this, ci = uniform(0, conns.size() - 1), n = uniform(1, 4)] {
        for (std::uint64_t i = 0; i < n; ++i)
          issue(ci);
      });
    }
  }

  /// Every millisecond, outside any turn: a burst on each queue pair with fewer than 4 operations in flight.
  void arm_top_up() {
    top_up.expires_after(std::chrono::milliseconds(1));
    top_up.async_wait([this](cv::error_code ec) {
      if (ec || issued >= total) return;
      for (std::size_t ci = 0; ci < conns.size(); ++ci)
        if (slots - conns[ci]->free_slots.size() < 4)
          for (std::uint64_t n = uniform(1, 8); n > 0; --n)
            issue(ci);
      arm_top_up();
    });
  }

  bool receives_done(const connection& c) const { return c.rx_handled == c.messages.size(); }
};

}  // namespace

TEST_CASE("10,000 random mixes over four queue pairs on one completion queue, one failing on purpose",
          "[batching][mix][errors]") {
  random_mix m(10'000);
  std::printf("batching mix: seed %llu (COVERBS_TEST_SEED=%llu repeats the choices)\n",
              static_cast<unsigned long long>(m.seed), static_cast<unsigned long long>(m.seed));
  std::fflush(stdout);
  INFO("seed " << m.seed << " (COVERBS_TEST_SEED); forbidden key on queue pair " << m.failing << " after " << m.bad_at
               << " operations");
  const cv::completion_queue_stats before = m.cq.stats();
  for (std::size_t ci = 0; ci < m.conns.size(); ++ci)  // from main, outside any turn
    for (int i = 0; i < 8; ++i)
      m.issue(ci);
  m.arm_top_up();
  const bool done = m.run_until(
      [&] {
        if (m.issued < m.total || m.handled < m.issued) return false;
        for (std::size_t ci = 0; ci < m.conns.size(); ++ci)
          if (ci != m.failing && !m.receives_done(*m.conns[ci])) return false;
        return true;
      },
      std::chrono::seconds(60));
  m.top_up.cancel();
  INFO(m.issued << " operations initiated, " << m.handled << " handlers ran; " << m.rx_handled << " of " << m.rx_posted
                << " receives");
  if (!done)
    for (const std::string& p : m.problems)
      FAIL_CHECK(p);
  REQUIRE(done);

  // The failed queue pair's peer: receives for sends that were flushed end with their queue pair, if the device
  // did not flush them already.
  connection& bad = *m.conns[m.failing];
  if (!m.receives_done(bad)) {
    cv::queue_pair gone = std::move(bad.b);
  }
  const bool flushed = m.run_until([&] { return m.receives_done(bad); }, std::chrono::seconds(10));
  for (const std::string& p : m.problems)
    FAIL_CHECK(p);
  CHECK(m.problem_count == 0);
  REQUIRE(flushed);

  const cv::completion_queue_stats after = m.cq.stats();
  std::printf(
      "batching mix: %zu operations (%zu from handlers, %zu from outside a turn), %zu receives; "
      "%llu doorbells for %llu send requests, %llu completions polled; forbidden key on queue pair %zu at #%llu\n",
      m.issued, m.from_handlers, m.from_outside, m.rx_posted,
      static_cast<unsigned long long>(after.send_doorbells - before.send_doorbells),
      static_cast<unsigned long long>(after.send_requests - before.send_requests),
      static_cast<unsigned long long>(after.completions - before.completions), m.failing,
      static_cast<unsigned long long>(bad.bad_seq.value_or(~0ull)));
  CHECK(m.issued == 10'000);
  CHECK(m.from_handlers > 0);
  CHECK(m.from_outside > 0);
  for (std::size_t ci = 0; ci < m.conns.size(); ++ci) {
    INFO("queue pair " << ci);
    connection& c = *m.conns[ci];
    CHECK(c.next_handled == c.next_seq);
    CHECK(std::count(c.calls.begin(), c.calls.end(), std::uint8_t{1}) == static_cast<std::ptrdiff_t>(c.calls.size()));
    CHECK(std::count(c.rx_calls.begin(), c.rx_calls.end(), std::uint8_t{1}) ==
          static_cast<std::ptrdiff_t>(c.rx_calls.size()));
    CHECK(c.free_slots.size() == slots);
    CHECK(c.a.sends_outstanding() == 0);
    for (std::size_t w = 0; w < atomic_words; ++w) {
      std::uint64_t word;
      std::memcpy(&word, c.remote.bytes.data() + c.word_offset(w), 8);
      CHECK(word == c.applied[w]);
      if (ci != m.failing) CHECK(word == c.model[w]);
    }
    if (ci == m.failing) {
      REQUIRE(c.bad_seq);
      CHECK(c.failed);
      CHECK(*c.bad_seq > 0);
      CHECK(c.next_seq > *c.bad_seq + 1);  // operations after the failed one were flushed
      CHECK(c.a.error() == cv::wc_errc::rem_access_err);
    } else {
      CHECK_FALSE(c.bad_seq);
      CHECK(c.a.error() == cv::error_code{});
      CHECK(c.b.error() == cv::error_code{});
      CHECK(c.after_failure > 0);  // it went on working after the other one failed
    }
  }
  CHECK(m.cq.outstanding() == 0);
}

// --- a lone operation, the list of one turn ---

TEST_CASE("a lone operation completes with nothing posted after it", "[batching]") {
  rc_pair p;
  test_buffer local(p.pd, 4096), remote(p.pd, 4096);
  for (std::size_t i = 0; i < local.bytes.size(); ++i)
    local.bytes[i] = std::byte(i % 241);

  // From outside any turn: posted at once.
  completion<std::size_t> lone;
  p.a.async_write(local.span(0, 100), remote.key(), lone.handler());
  REQUIRE(p.run_until([&] { return lone.done(); }, std::chrono::seconds(10)));
  CHECK_FALSE(*lone.ec);
  CHECK(lone.value == 100);
  CHECK(remote.str(0, 100) == local.str(0, 100));

  // From inside a completion handler, the last thing it does: posted when the turn ends, signaled.
  completion<std::size_t> first, inner;
  p.a.async_write(local.span(0, 8), remote.key(), [&](cv::error_code ec, std::size_t n) {
    first.ec = ec;
    first.value = n;
    p.a.async_write(local.span(200, 300), remote.key().slice(200, 300), inner.handler());
  });
  REQUIRE(p.run_until([&] { return inner.done(); }, std::chrono::seconds(10)));
  CHECK_FALSE(*first.ec);
  CHECK_FALSE(*inner.ec);
  CHECK(inner.value == 300);
  CHECK(inner.calls == 1);
  CHECK(remote.str(200, 300) == local.str(200, 300));
  CHECK(p.a.sends_outstanding() == 0);
  CHECK(p.cq.outstanding() == 0);
}

TEST_CASE("operations initiated in one turn share one doorbell and one completion", "[batching]") {
  rc_pair p;  // send-queue depth 128: lists of up to 32
  constexpr int writes = 16;
  test_buffer local(p.pd, writes * 64), remote(p.pd, writes * 64);
  for (std::size_t i = 0; i < local.bytes.size(); ++i)
    local.bytes[i] = std::byte(i * 7 % 253);
  cv::completion_queue_stats before{};
  std::vector<int> order;
  int failures = 0;
  completion<std::size_t> first;
  p.a.async_write(local.span(0, 8), remote.key(), [&](cv::error_code ec, std::size_t n) {
    first.ec = ec;
    first.value = n;
    before = p.cq.stats();
    for (int i = 0; i < writes; ++i)
      p.a.async_write(local.span(i * 64, 64), remote.key().slice(i * 64, 64), [&, i](cv::error_code e, std::size_t m) {
        if (e || m != 64) ++failures;
        order.push_back(i);
      });
  });
  REQUIRE(p.run_until([&] { return order.size() == writes; }, std::chrono::seconds(10)));
  const cv::completion_queue_stats after = p.cq.stats();
  CHECK_FALSE(*first.ec);
  CHECK(failures == 0);
  CHECK(std::is_sorted(order.begin(), order.end()));
  CHECK(after.send_doorbells - before.send_doorbells == 1);
  CHECK(after.send_requests - before.send_requests == writes);
  CHECK(after.completions - before.completions == 1);
  CHECK(remote.str(0, writes * 64) == local.str(0, writes * 64));
  CHECK(p.a.sends_outstanding() == 0);
  CHECK(p.cq.outstanding() == 0);
}

// --- cancellation of what a turn holds ---

TEST_CASE(
    "an operation cancelled in the turn that initiated it completes with operation_aborted, nothing posted for it",
    "[batching][cancel]") {
  rc_pair p;
  test_buffer local(p.pd, 64), remote(p.pd, 64);
  local.fill('c');

  // Alone in its turn's list: the list is empty when the turn ends. Any of the three cancellation types takes
  // out a request that is not posted yet.
  cv::completion_queue_stats s0{};
  for (const auto type :
       {asio::cancellation_type::terminal, asio::cancellation_type::partial, asio::cancellation_type::total}) {
    INFO("cancellation_type " << static_cast<unsigned>(type));
    completion<std::size_t> trigger, alone;
    asio::cancellation_signal alone_signal;
    p.a.async_write(local.span(0, 8), remote.key().slice(0, 8), [&](cv::error_code ec, std::size_t n) {
      trigger.ec = ec;
      trigger.value = n;
      s0 = p.cq.stats();
      p.a.async_write(local.span(8, 8), remote.key().slice(8, 8),
                      asio::bind_cancellation_slot(alone_signal.slot(), alone.handler()));
      alone_signal.emit(type);
    });
    REQUIRE(p.run_until([&] { return alone.done(); }, std::chrono::seconds(10)));
    p.io.restart();
    p.io.run_for(std::chrono::milliseconds(300));  // room for anything it might still do
    const cv::completion_queue_stats s1 = p.cq.stats();
    CHECK_FALSE(*trigger.ec);
    CHECK(*alone.ec == asio::error::operation_aborted);
    CHECK(alone.calls == 1);
    CHECK(s1.send_requests - s0.send_requests == 0);
    CHECK(s1.send_doorbells - s0.send_doorbells == 0);
    CHECK(remote.str(8, 8) == std::string(8, '\0'));  // never written
    CHECK_FALSE(p.a.error());
    CHECK(p.a.sends_outstanding() == 0);
  }

  // Between two others of the same list: they are posted and succeed, it alone is aborted.
  completion<std::size_t> trigger2, before_it, cancelled, after_it;
  asio::cancellation_signal signal;
  p.a.async_write(local.span(0, 8), remote.key().slice(0, 8), [&](cv::error_code ec, std::size_t n) {
    trigger2.ec = ec;
    trigger2.value = n;
    s0 = p.cq.stats();
    p.a.async_write(local.span(16, 8), remote.key().slice(16, 8), before_it.handler());
    p.a.async_write(local.span(24, 8), remote.key().slice(24, 8),
                    asio::bind_cancellation_slot(signal.slot(), cancelled.handler()));
    p.a.async_write(local.span(32, 8), remote.key().slice(32, 8), after_it.handler());
    signal.emit(asio::cancellation_type::terminal);
  });
  REQUIRE(
      p.run_until([&] { return before_it.done() && cancelled.done() && after_it.done(); }, std::chrono::seconds(10)));
  const cv::completion_queue_stats s2 = p.cq.stats();
  CHECK_FALSE(*trigger2.ec);
  CHECK(*cancelled.ec == asio::error::operation_aborted);
  CHECK(cancelled.calls == 1);
  CHECK_FALSE(*before_it.ec);
  CHECK_FALSE(*after_it.ec);
  CHECK(s2.send_requests - s0.send_requests == 2);
  CHECK(s2.send_doorbells - s0.send_doorbells == 1);
  CHECK(remote.str(16, 8) == std::string(8, 'c'));
  CHECK(remote.str(24, 8) == std::string(8, '\0'));  // never written
  CHECK(remote.str(32, 8) == std::string(8, 'c'));

  // Healthy: the next write succeeds.
  CHECK_FALSE(p.a.error());
  CHECK(p.a.state() == IBV_QPS_RTS);
  completion<std::size_t> next;
  p.a.async_write(local.span(40, 8), remote.key().slice(40, 8), next.handler());
  REQUIRE(p.run_until([&] { return next.done(); }, std::chrono::seconds(10)));
  CHECK_FALSE(*next.ec);
  CHECK_FALSE(p.a.error());
}

TEST_CASE("write || write in one list: the loser's cancellation after the list's completion was polled does nothing",
          "[batching][cancel][race]") {
  rc_pair p;
  test_buffer local(p.pd, 64), remote(p.pd, 64);
  local.fill('w');

  SECTION("make_parallel_group started from a completion handler") {
    for (int round = 0; round < 10; ++round) {
      INFO("round " << round);
      cv::completion_queue_stats s0{};
      std::optional<std::array<std::size_t, 2>> order;
      cv::error_code e1, e2;
      std::size_t n1 = 0, n2 = 0;
      p.a.async_write(local.span(0, 8), remote.key().slice(0, 8), [&](cv::error_code, std::size_t) {
        s0 = p.cq.stats();
        asio::experimental::make_parallel_group(
            p.a.async_write(local.span(8, 8), remote.key().slice(8, 8), asio::deferred),
            p.a.async_write(local.span(16, 8), remote.key().slice(16, 8), asio::deferred))
            .async_wait(asio::experimental::wait_for_one(), [&](std::array<std::size_t, 2> o, cv::error_code a,
                                                                std::size_t na, cv::error_code b, std::size_t nb) {
              order = o;
              e1 = a;
              n1 = na;
              e2 = b;
              n2 = nb;
            });
      });
      REQUIRE(p.run_until([&] { return order.has_value(); }, std::chrono::seconds(10)));
      const cv::completion_queue_stats s1 = p.cq.stats();
      CHECK(s1.send_doorbells - s0.send_doorbells == 1);  // both in one list
      CHECK(s1.send_requests - s0.send_requests == 2);
      CHECK((*order)[0] == 0);  // the first of the list completes first
      CHECK_FALSE(e1);
      CHECK(n1 == 8);
      CHECK_FALSE(e2);  // its completion was in hand when the cancellation came: its real result
      CHECK(n2 == 8);
      CHECK_FALSE(p.a.error());
      completion<std::size_t> next;
      p.a.async_write(local.span(24, 8), remote.key().slice(24, 8), next.handler());
      REQUIRE(p.run_until([&] { return next.done(); }, std::chrono::seconds(10)));
      CHECK_FALSE(*next.ec);
    }
  }

  SECTION("co_await (write || write) in a coroutine a completion resumed") {
    p.run([&]() -> awaitable<void> {
      for (int round = 0; round < 10; ++round) {
        INFO("round " << round);
        // Resumed by this write's completion, inside the turn: the two writes below join one list.
        (void)co_await p.a.async_write(local.span(0, 8), remote.key().slice(0, 8), use_awaitable);
        auto r = co_await (p.a.async_write(local.span(8, 8), remote.key().slice(8, 8), use_awaitable) ||
                           p.a.async_write(local.span(16, 8), remote.key().slice(16, 8), use_awaitable));
        CHECK(r.index() <= 1);
        CHECK_FALSE(p.a.error());
        const std::size_t n = co_await p.a.async_write(local.span(24, 8), remote.key().slice(24, 8), use_awaitable);
        CHECK(n == 8);
      }
    });
  }
  CHECK_FALSE(p.a.error());
  CHECK(p.a.state() == IBV_QPS_RTS);
  CHECK(remote.str(0, 32) == std::string(32, 'w'));
}
