// A pool of loops on a real device (rxe0 with 10.77.0.1 in the Soft-RoCE guest): a listener on one loop
// hands accepted connections to pool members, whose threads then run all of their operations; queue
// pairs and connections whose completion queue belongs to another executor are refused; the pool can be
// destroyed with connections alive.
#include <coverbs/cm.hpp>
#include <coverbs/loop_pool.hpp>
#include <coverbs/window_pool.hpp>

#include "fixtures/completion.hpp"
#include "fixtures/event_loop.hpp"
#include "fixtures/test_buffer.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <atomic>
#include <cstring>
#include <deque>
#include <exception>
#include <future>
#include <set>
#include <thread>

namespace asio = boost::asio;
namespace cv = coverbs;
using asio::awaitable;
using asio::use_awaitable;
using test::test_buffer;

namespace {

constexpr const char* address = "10.77.0.1";  // veth0, under rxe0
constexpr auto as_tuple = asio::as_tuple(use_awaitable);

/// What one end of a connection saw, written on its member's thread and read on the test's thread once
/// `done` is set.
struct record {
  std::size_t member = 0;
  std::vector<std::thread::id> threads;  // where each step of the coroutine ran
  int echoed = 0;
  bool flushed = false;
  std::string failure;
  std::atomic<bool> done{false};
  std::atomic<int> steps{0};  // how far the coroutine got: read while it runs, for a diagnosis

  void here() {
    threads.push_back(std::this_thread::get_id());
    steps.fetch_add(1, std::memory_order_relaxed);
  }
  auto on_exit() {
    return [this](std::exception_ptr e) {
      if (e) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& x) {
          failure = x.what();
        }
      }
      done.store(true, std::memory_order_release);
    };
  }
};

bool all_on(const record& r, std::thread::id id) {
  return !r.threads.empty() && std::all_of(r.threads.begin(), r.threads.end(), [&](auto t) { return t == id; });
}

/// Server side: echoes three messages, then waits for the client's disconnect (the receive still posted
/// is flushed).
awaitable<void> serve(cv::connection conn, record& rec) {
  rec.here();
  test_buffer buf(conn.pd(), 4096);
  for (int i = 0; i < 3; ++i) {
    const cv::received r = co_await conn.qp().async_recv(buf.span());
    rec.here();
    co_await conn.qp().async_send(buf.span(0, r.bytes));
    rec.here();
    ++rec.echoed;
  }
  auto [ec, r] = co_await conn.qp().async_recv(buf.span(), as_tuple);
  rec.here();
  rec.flushed = ec == cv::wc_errc::wr_flush_err && conn.error() == cv::errc::connection_reset;
}

/// Client side, on a member of another pool: connects from that member, sends three messages and checks
/// their echoes, disconnects.
awaitable<void> call(cv::loop_pool::member& m, std::uint16_t port, int id, record& rec) {
  rec.here();
  // Named, not temporaries in the co_await expression: GCC 12 destroys such temporaries twice.
  auto options = m.connection_options<cv::connect_options>();
  // Six connects at once, accepted one after another, on five threads over two virtual CPUs: a sanitizer
  // build in the emulated guest can take longer than the defaults (10 s in all).
  options.connect_timeout = test::scaled(std::chrono::seconds(10));
  const cv::loop_pool::executor_type ex = m.get_executor();
  cv::connection conn = co_await cv::async_connect(ex, address, port, options);
  rec.here();
  test_buffer out(conn.pd(), 4096), in(conn.pd(), 4096);
  for (int i = 0; i < 3; ++i) {
    const std::string msg = "connection " + std::to_string(id) + " message " + std::to_string(i);
    std::memcpy(out.bytes.data(), msg.data(), msg.size());
    co_await conn.qp().async_send(out.span(0, msg.size()));
    rec.here();
    const cv::received r = co_await conn.qp().async_recv(in.span());
    rec.here();
    if (in.str(0, r.bytes) == msg) ++rec.echoed;
  }
  co_await conn.async_disconnect(use_awaitable);
  rec.here();
}

}  // namespace

TEST_CASE("a listener hands connections to pool members, whose threads run all their handlers", "[loop_pool]") {
  test::event_loop loop;  // the listener's loop, run by this thread
  cv::listener l(loop.io.get_executor(), address, 0);
  cv::loop_pool servers(l.get_device(), {.loops = 3});
  cv::loop_pool clients(l.get_device(), {.loops = 2});
  servers.run();
  clients.run();
  std::set<std::thread::id> member_threads;
  for (std::size_t i = 0; i < 3; ++i) member_threads.insert(servers[i].thread_id());
  for (std::size_t i = 0; i < 2; ++i) member_threads.insert(clients[i].thread_id());
  REQUIRE(member_threads.size() == 5);
  REQUIRE_FALSE(member_threads.count(std::this_thread::get_id()));

  constexpr int n = 6;
  std::deque<record> server_side(n), client_side(n);
  std::vector<std::size_t> loads_at_placement;
  auto acceptor = [&]() -> awaitable<void> {
    for (int i = 0; i < n; ++i) {
      cv::loop_pool::member& m = servers.least_loaded();
      const auto options = m.connection_options();  // named: see call()
      const cv::loop_pool::executor_type ex = m.get_executor();
      cv::connection c = co_await l.async_accept(ex, options);
      // The accept's handler runs on the listener's loop; the connection belongs to a member: m, or the
      // member of a handshake carried over from an earlier accept (listener::async_accept).
      CHECK(std::this_thread::get_id() != m.thread_id());
      std::size_t on = servers.size();
      for (std::size_t k = 0; k < servers.size(); ++k)
        if (c.get_executor() == servers[k].get_executor()) on = k;
      REQUIRE(on < servers.size());
      CHECK(&c.cq() == &servers[on].cq());
      CHECK(&c.pd() == &servers[on].pd());
      loads_at_placement.push_back(servers[on].load());
      server_side[i].member = on;
      const auto conn_ex = c.get_executor();  // before c is moved into the coroutine (argument order)
      asio::co_spawn(conn_ex, serve(std::move(c), server_side[i]), server_side[i].on_exit());
    }
  };
  auto accepted = asio::co_spawn(loop.io, acceptor(), asio::use_future);
  for (int i = 0; i < n; ++i) {
    cv::loop_pool::member& m = clients.next();
    client_side[i].member = m.index();
    asio::co_spawn(m.get_executor(), call(m, l.local_port(), i, client_side[i]), client_side[i].on_exit());
  }
  const auto ready = [](auto& f) { return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready; };
  // What each side had reached, should the exchange not finish in time.
  const auto progress = [&] {
    std::string s = "accepted " + std::to_string(loads_at_placement.size()) + " of " + std::to_string(n) + ";";
    for (int i = 0; i < n; ++i)
      s += " [" + std::to_string(i) + "] client steps " + std::to_string(client_side[i].steps.load()) +
           (client_side[i].done.load() ? " (ended" + (client_side[i].failure.empty() ? "" : ": " + client_side[i].failure) + ")" : "") +
           ", server steps " + std::to_string(server_side[i].steps.load()) +
           (server_side[i].done.load() ? " (ended)" : "") + ";";
    return s;
  };
  const bool finished = loop.run_until(
      [&] {
        const auto done = [](auto& r) { return r.done.load(); };
        if (std::any_of(client_side.begin(), client_side.end(), [&](auto& r) { return done(r) && !r.failure.empty(); }))
          return true;  // a client failed: its server side will never be accepted
        return ready(accepted) && std::all_of(client_side.begin(), client_side.end(), done) &&
               std::all_of(server_side.begin(), server_side.end(), [](auto& r) { return r.done.load(); });
      },
      std::chrono::seconds(240));
  INFO(progress());
  REQUIRE(finished);
  for (auto& r : client_side) REQUIRE(r.failure.empty());
  accepted.get();

  std::set<std::size_t> used;
  for (int i = 0; i < n; ++i) {
    INFO("connection " << i << " on server member " << server_side[i].member << ", client member "
                       << client_side[i].member);
    const record& s = server_side[i];
    const record& c = client_side[i];
    CHECK(s.failure.empty());
    CHECK(s.echoed == 3);
    CHECK(s.flushed);
    CHECK(c.echoed == 3);
    CHECK(all_on(s, servers[s.member].thread_id()));
    CHECK(all_on(c, clients[c.member].thread_id()));
    CHECK(s.threads.size() == 8);
    CHECK(c.threads.size() == 9);
    used.insert(s.member);
    CHECK(loads_at_placement[i] >= 1);  // the connection holds its lease
  }
  CHECK(used.size() == 3);  // placed on every member
  // Every connection closed: every lease is back.
  REQUIRE(loop.run_until([&] {
    std::size_t load = 0;
    for (std::size_t i = 0; i < servers.size(); ++i) load += servers[i].load();
    for (std::size_t i = 0; i < clients.size(); ++i) load += clients[i].load();
    return load == 0;
  }));
}

TEST_CASE("a queue pair or connection whose completion queue belongs to another executor is refused",
          "[loop_pool]") {
  test::event_loop loop;
  cv::listener l(loop.io.get_executor(), address, 0);
  cv::loop_pool pool(l.get_device(), {.loops = 2});
  pool.run();

  // Send and receive queues on different members.
  try {
    cv::queue_pair qp(pool[0].pd(), pool[0].cq(), pool[1].cq());
    FAIL("a queue pair spanning two executors was created");
  } catch (const cv::system_error& e) {
    CHECK(e.code() == cv::errc::executor_mismatch);
  }
  // Both on one member: fine.
  cv::queue_pair ok(pool[1].pd(), pool[1].cq(), pool[1].cq());
  CHECK(ok.get_executor() == pool[1].get_executor());

  // An accept bound to member 0 with member 1's queue; a connect likewise. Nothing is taken from the
  // listener's backlog, and the leases are released.
  std::optional<cv::error_code> accept_ec, connect_ec;
  l.async_accept(pool[0].get_executor(), pool[1].connection_options(),
                 [&](cv::error_code ec, cv::connection) { accept_ec = ec; });
  cv::async_connect(pool[0].get_executor(), address, l.local_port(), pool[1].connection_options<cv::connect_options>(),
                    asio::bind_executor(loop.io, [&](cv::error_code ec, cv::connection) { connect_ec = ec; }));
  REQUIRE(loop.run_until([&] { return accept_ec && connect_ec; }));
  CHECK(*accept_ec == cv::errc::executor_mismatch);
  CHECK(*connect_ec == cv::errc::executor_mismatch);
  CHECK(pool[1].load() == 0);

  // The listener still works: a correct accept and connect on the members now succeed.
  std::optional<cv::error_code> a2, c2;
  cv::connection server, client;
  l.async_accept(pool[0].get_executor(), pool[0].connection_options(), [&](cv::error_code ec, cv::connection c) {
    a2 = ec;
    server = std::move(c);
  });
  cv::async_connect(pool[1].get_executor(), address, l.local_port(), pool[1].connection_options<cv::connect_options>(),
                    asio::bind_executor(loop.io, [&](cv::error_code ec, cv::connection c) {
                      c2 = ec;
                      client = std::move(c);
                    }));
  REQUIRE(loop.run_until([&] { return a2 && c2; }, std::chrono::seconds(60)));
  CHECK_FALSE(*a2);
  CHECK_FALSE(*c2);
  CHECK(pool[0].load() == 1);
  CHECK(pool[1].load() == 1);
  // Connections are destroyed on their own executors.
  asio::post(server.get_executor(), asio::use_future([&] { server = {}; })).get();
  asio::post(client.get_executor(), asio::use_future([&] { client = {}; })).get();
  CHECK(pool[0].load() == 0);
  CHECK(pool[1].load() == 0);
}

TEST_CASE("destroying the pool with idle sessions alive destroys their connections and the peers see it",
          "[loop_pool]") {
  test::event_loop loop;
  cv::listener l(loop.io.get_executor(), address, 0);
  auto pool = std::make_optional<cv::loop_pool>(l.get_device(), cv::loop_pool_options{.loops = 2});
  pool->run();

  constexpr int n = 2;
  auto alive = std::make_shared<int>(0);  // copied into every server session
  std::atomic<int> started{0};
  auto session = [](cv::connection conn, std::shared_ptr<int> keep, std::atomic<int>& started) -> awaitable<void> {
    (void)keep;  // destroyed with the frame
    test_buffer buf(conn.pd(), 4096);
    started.fetch_add(1);
    // Waits on the loop (a session idle between requests); the pool goes first. (A coroutine suspended
    // on a queue-pair operation is owned by that operation, not by the loop: close such connections
    // before destroying the pool.)
    const auto ex = co_await asio::this_coro::executor;
    asio::steady_timer idle(ex, std::chrono::hours(1));
    co_await idle.async_wait(use_awaitable);
  };
  std::vector<cv::connection> peers(n);
  std::vector<test::completion<cv::received>> flushed(n);
  std::deque<test_buffer> peer_bufs;
  auto drive = [&]() -> awaitable<void> {
    for (int i = 0; i < n; ++i) {
      cv::loop_pool::member& m = pool->next();
      auto accept = l.async_accept(m.get_executor(), m.connection_options(), asio::use_future);
      const cv::connect_options options;  // named: see call()
      const cv::loop_pool::executor_type ex = loop.io.get_executor();
      peers[i] = co_await cv::async_connect(ex, address, l.local_port(), options);
      // The accept completes on this loop; wait for it without blocking the loop.
      while (accept.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
        asio::steady_timer t(loop.io, std::chrono::milliseconds(5));
        co_await t.async_wait(use_awaitable);
      }
      cv::connection c = accept.get();
      const auto conn_ex = c.get_executor();
      asio::co_spawn(conn_ex, session(std::move(c), alive, started), asio::detached);
    }
  };
  loop.run(drive, std::chrono::seconds(120));
  REQUIRE(loop.run_until([&] { return started.load() == n; }));
  for (int i = 0; i < n; ++i) {
    peer_bufs.emplace_back(peers[i].pd(), 4096);
    peers[i].qp().async_recv(peer_bufs.back().span(), flushed[i].handler());
  }
  CHECK(alive.use_count() == 1 + n);

  pool.reset();  // stops, joins, destroys the sessions (and their connections), the queues, the domain
  CHECK(alive.use_count() == 1);
  // The peers' connections are reset: their outstanding receives are flushed.
  REQUIRE(loop.run_until([&] { return flushed[0].done() && flushed[1].done(); }, std::chrono::seconds(60)));
  for (int i = 0; i < n; ++i) {
    CHECK(*flushed[i].ec == cv::wc_errc::wr_flush_err);
    CHECK(peers[i].error() == cv::errc::connection_reset);
  }
}

TEST_CASE("pd() is the members' shared domain without a lease; per-member window pools made on their threads",
          "[loop_pool]") {
  cv::device dev = cv::device::open();
  cv::loop_pool pool(dev, {.loops = 2});
  CHECK(&pool.pd() == &pool[0].pd());
  CHECK(&pool.pd() == &pool[1].pd());
  CHECK(pool[0].load() == 0);  // no lease taken
  CHECK(pool[1].load() == 0);
  test_buffer buf(pool.pd(), 4096);  // memory registered once for every member

  pool.emplace_state<cv::window_pool>([](cv::loop_pool::member& m) {
    return cv::window_pool(m.pd(), {.initial_windows = 2});
  });
  pool.run();
  for (std::size_t i = 0; i < pool.size(); ++i) {
    auto& m = pool[i];
    auto fut = asio::post(m.get_executor(), asio::use_future([&pool] {
                            return pool.current()->state<cv::window_pool>().size();
                          }));
    REQUIRE(fut.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
    CHECK(fut.get() == 2);
  }

  cv::loop_pool per_loop(dev, {.loops = 2, .pd_per_loop = true});
  CHECK(&per_loop[0].pd() != &per_loop[1].pd());
  CHECK_THROWS_WITH(per_loop.pd(), Catch::Contains("one protection domain per member") &&
                                       Catch::Contains("member::pd()"));
}
