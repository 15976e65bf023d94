#pragma once
// What the example programs share: their command line (a role plus numeric options, each with the roles it
// belongs to), the device check of a listener, a patient connect, timing figures for the report, callback
// completions awaited one by one with a deadline, the device's events (a port going down), bounded
// disconnects, and a loop runner with a watchdog that also ends on SIGINT or SIGTERM.
#include <coverbs/cm.hpp>
#include <coverbs/device_events.hpp>
#include <coverbs/error.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "../../tools/command_line.hpp"
#include "../../tools/statistics.hpp"

#include <arpa/inet.h>
#include <net/if.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace example {

namespace asio = boost::asio;
using coverbs::error_code;
using clock = std::chrono::steady_clock;

/// Awaitable operations that complete with their error code instead of throwing it.
inline constexpr auto tuple = asio::as_tuple(asio::use_awaitable);

// --- command line ---

/// What the program does: everything in one process, or one side of it.
enum class role { self_test, listen, connect };

/// Roles an option belongs to (a mask of `role`s).
enum role_set : unsigned {
  in_self_test = 1u << static_cast<unsigned>(role::self_test),
  in_listen = 1u << static_cast<unsigned>(role::listen),
  in_connect = 1u << static_cast<unsigned>(role::connect),
  in_any_role = in_self_test | in_listen | in_connect,
};

/// The option that picks role `r`: "--self-test", "--listen" or "--connect".
inline const char* role_option(role r) {
  return r == role::self_test ? "--self-test" : r == role::listen ? "--listen" : "--connect";
}

/// The device a listener on `address` is bound to, where a server makes its protection domain and completion
/// queue. @throws std::runtime_error saying what to listen on when it has none: a listener on a loopback or
/// wildcard address (127.0.0.1, 0.0.0.0, ::) is not tied to one device.
inline coverbs::device& listening_device(coverbs::listener& l, const std::string& address) {
  if (!l.get_device())
    throw std::runtime_error("'" + address +
                             "' is not the address of one RDMA device: listen on the address of an RDMA device's "
                             "network interface (e.g. 10.77.0.1 in the Soft-RoCE guest); loopback and wildcard "
                             "addresses are not tied to one device, and this example shares one protection domain "
                             "between its connections");
  return l.get_device();
}

struct command_line {
  role mode = role::self_test;
  std::string address = "10.77.0.1";  ///< numeric IPv4/IPv6: the Soft-RoCE guest's rxe0 by default
  std::uint16_t port = 0;             ///< 0 in self-test mode: the listener picks one

  bool self_test() const noexcept { return mode == role::self_test; }
  /// This process runs the server (--listen, --self-test).
  bool serving() const noexcept { return mode != role::connect; }
  /// This process runs clients (--connect, --self-test).
  bool connecting() const noexcept { return mode != role::listen; }
  /// The listener for a serving role: on `address` and `port` (0 in self-test mode: any free port).
  /// @throws std::runtime_error when it has no device (see `listening_device`).
  std::optional<coverbs::listener> listen(const asio::any_io_executor& ex) const {
    std::optional<coverbs::listener> l;
    if (serving()) listening_device(l.emplace(ex, address, port), address);
    return l;
  }
};

/// A `--name N` option holding a whole number in [min, max], given with the roles in `roles`.
struct numeric_option {
  std::string_view name;
  std::uint64_t* value;
  std::uint64_t min, max;
  unsigned roles = in_any_role;
  bool bytes = false;  ///< a size: K, M and G (binary) suffixes allowed
};

/// A `--name` flag (no value), given with the roles in `roles`.
struct flag_option {
  std::string_view name;
  bool* value;
  unsigned roles = in_any_role;
};

/// Prints why the command line is bad and where to look. @returns 2, the exit status for a bad command line.
inline int bad_command_line(const std::string& prog, const std::string& why) { return ::command_line::bad(prog, why); }

namespace detail {

/// A numeric IPv4 or IPv6 address; an IPv6 one may name its interface ("fe80::1%veth0"), which a
/// link-local address needs.
inline bool numeric_address(const std::string& text) {
  unsigned char bytes[16];
  if (inet_pton(AF_INET, text.c_str(), bytes) == 1 || inet_pton(AF_INET6, text.c_str(), bytes) == 1) return true;
  const auto percent = text.find('%');
  if (percent == std::string::npos || percent + 1 == text.size()) return false;
  return inet_pton(AF_INET6, text.substr(0, percent).c_str(), bytes) == 1 &&
         if_nametoindex(text.substr(percent + 1).c_str()) != 0;
}

/// "--listen or --self-test".
inline std::string roles_text(unsigned roles) {
  std::string out;
  for (role r : {role::self_test, role::listen, role::connect})
    if (roles & (1u << static_cast<unsigned>(r))) out += (out.empty() ? "" : " or ") + std::string(role_option(r));
  return out;
}

}  // namespace detail

/// Adds option `o` to `app`: a whole number, or a size with `o.bytes` (tools/command_line.hpp validators).
inline CLI::Option* add_numeric(CLI::App& app, const numeric_option& o) {
  const std::string name(o.name);
  if (o.bytes) return app.add_option(name, *o.value)->transform(::command_line::size(o.min, o.max));
  return app.add_option(name, *o.value)->transform(::command_line::count(o.min, o.max));
}

/// The port of `--listen ADDR PORT` or `--connect ADDR PORT`, from `lowest` to 65535, or why it is bad.
inline std::optional<std::string> parse_port(const std::string& text, std::uint64_t lowest, std::uint16_t& port) {
  const auto n = text.find_first_not_of("0123456789") == std::string::npos ? size_argument::parse(text, lowest, 65535)
                                                                           : std::nullopt;
  if (!n) return "the port must be a number from " + std::to_string(lowest) + " to 65535 (got '" + text + "')";
  port = static_cast<std::uint16_t>(*n);
  return std::nullopt;
}

/// Why `bytes` of memory to register for `what` (set by option `flag`) cannot be had on this machine (it
/// exceeds physical memory; registered memory is pinned), or nothing. Checked before anything is allocated.
inline std::optional<std::string> check_fits(std::string_view what, std::uint64_t bytes, std::string_view flag,
                                             std::uint64_t flag_value) {
  return size_argument::exceeds_memory(what, bytes, flag, flag_value);
}

/// The reason `address` cannot be used, or nothing for a numeric IPv4 or IPv6 address.
inline std::optional<std::string> check_address(const std::string& address) {
  if (detail::numeric_address(address)) return std::nullopt;
  if (address.find('%') != std::string::npos)
    return "'" + address + "' is not a numeric IPv6 address with an interface of this host (e.g. fe80::1%veth0)";
  return "'" + address + "' is not a numeric IPv4 or IPv6 address (rdma_cm connects without name lookup)";
}

/// The reason option `name`, which belongs to `roles`, does not go with role `mode`, or nothing.
inline std::optional<std::string> check_role(std::string_view name, unsigned roles, role mode) {
  if (roles & (1u << static_cast<unsigned>(mode))) return std::nullopt;
  return std::string(name) + " goes with " + detail::roles_text(roles) + ", not with " + role_option(mode);
}

/// Parses `--help`, the role (`--self-test [--address ADDR]`, `--listen ADDR PORT`, `--connect ADDR PORT`),
/// `options` and `flags` with CLI11; an option or flag given with a role it does not belong to is bad input.
/// Prints `usage` for --help, or the reason for bad input.
/// @returns the exit status to leave with now (0 after --help, 2 for bad input), or nothing to go on.
inline std::optional<int> parse_command_line(int argc, char** argv, std::string_view usage, command_line& out,
                                             std::initializer_list<numeric_option> options,
                                             std::initializer_list<flag_option> flags = {}) {
  const std::string prog = argc > 0 ? argv[0] : "example";
  auto bad = [&](const std::string& why) { return std::optional<int>(bad_command_line(prog, why)); };
  CLI::App app{"", prog};
  ::command_line::describe(
      app, std::string(usage) +
               "Exit status: 0 every check held; 1 a check failed or an error occurred; 2 bad command line.\n");
  bool self_test = false;
  std::vector<std::string> listen, connect;
  app.add_flag("--self-test", self_test);
  app.add_option("--listen", listen)->expected(2);
  app.add_option("--connect", connect)->expected(2);
  app.add_option("--address", out.address);
  std::vector<std::pair<std::string_view, unsigned>> roles{{"--address", in_self_test}};  // options and their roles
  for (const numeric_option& o : options) {
    add_numeric(app, o);
    roles.emplace_back(o.name, o.roles);
  }
  for (const flag_option& f : flags) {
    app.add_flag(std::string(f.name), *f.value);
    roles.emplace_back(f.name, f.roles);
  }
  if (const std::optional<int> status = ::command_line::parse(app, argc, argv)) return status;
  if (self_test + !listen.empty() + !connect.empty() != 1)
    return bad(self_test || !listen.empty() || !connect.empty()
                   ? "give one of --self-test, --listen and --connect"
                   : "say what to run: --self-test, --listen ADDR PORT or --connect ADDR PORT");
  if (!self_test) {
    const std::vector<std::string>& where = listen.empty() ? connect : listen;
    const char* const option = listen.empty() ? "--connect" : "--listen";
    if (where.size() != 2)  // CLI11 hands over what it found; one value is not an address and a port
      return bad(std::string(option) + " takes ADDR PORT, and the " +
                 (where.empty() ? "address and the port are" : "port is") + " missing: e.g. " + option +
                 " 10.77.0.1 7471");
    out.mode = listen.empty() ? role::connect : role::listen;
    out.address = where[0];
    if (const auto why = parse_port(where[1], 1, out.port)) return bad(*why);
  }
  for (const auto& [name, in] : roles)
    if (app.count(std::string(name)))
      if (const auto why = check_role(name, in, out.mode)) return bad(*why);
  if (const auto why = check_address(out.address)) return bad(*why);
  return std::nullopt;
}

/// The body of an example's `main`: parses the command line (as `parse_command_line`), then runs `run(cmd)`.
/// An exception escaping it is printed as `name: what`. @returns the exit status.
template <class Run>
int run_main(int argc, char** argv, const char* name, std::string_view usage,
             std::initializer_list<numeric_option> options, std::initializer_list<flag_option> flags, Run run) {
  command_line cmd;
  if (const std::optional<int> status = parse_command_line(argc, argv, usage, cmd, options, flags)) return *status;
  try {
    return run(cmd);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 1;
  }
}

/// As above, with numeric options only.
template <class Run>
int run_main(int argc, char** argv, const char* name, std::string_view usage,
             std::initializer_list<numeric_option> options, Run run) {
  return run_main(argc, argv, name, usage, options, {}, std::move(run));
}

// --- connecting ---

/// `coverbs::async_connect` to `where`; a refused request (nobody listens there yet) is tried again every
/// 100 ms for up to `patience`, so a client may be started together with its server. Each try's error is
/// stored in `*last_try` when given, so a caller whose own time limit ends first can still say why (e.g.
/// "connection refused", not that nothing replied).
/// @returns the last try's error (success, or as `async_connect`) and the connection.
inline asio::awaitable<std::tuple<error_code, coverbs::connection>>
connect_patiently(asio::any_io_executor ex, command_line where, coverbs::connect_options options,
                  std::chrono::milliseconds patience = std::chrono::seconds(10), error_code* last_try = nullptr) {
  const auto give_up = clock::now() + patience;
  for (;;) {
    auto [ec, conn] = co_await coverbs::async_connect(ex, where.address, where.port, options, tuple);
    if (last_try) *last_try = ec;
    if (ec != coverbs::errc::connection_refused || clock::now() >= give_up) co_return std::tuple(ec, std::move(conn));
    asio::steady_timer pause(ex, std::chrono::milliseconds(100));
    co_await pause.async_wait(tuple);
  }
}

// --- timings ---

/// Durations of one kind of step, in microseconds, summarised for the report.
class timings {
public:
  void add(clock::duration d) { us_.push_back(std::chrono::duration<double, std::micro>(d).count()); }
  std::size_t count() const noexcept { return us_.size(); }
  /// "n 1600, median 120.5 us, p99 480.2 us" (tools/statistics.hpp says how they are taken).
  std::string summary() const {
    const statistics::summary s = statistics::summarize(us_);
    char text[96];
    std::snprintf(text, sizeof text, "n %zu, median %.1f us, p99 %.1f us", s.count, s.median, s.p99);
    return text;
  }
  void merge(const timings& other) { us_.insert(us_.end(), other.us_.begin(), other.us_.end()); }

private:
  std::vector<double> us_;
};

/// Microseconds since `start`.
inline double us_since(clock::time_point start) {
  return std::chrono::duration<double, std::micro>(clock::now() - start).count();
}

// --- completions awaited one by one ---

/// One completion taken from `completions`: the error, the caller's tag, and the operation's value.
template <class Value>
struct completion {
  error_code ec;
  std::size_t tag = 0;
  Value value{};
};

/// Operations started with callbacks (`handler(tag)` as their token), awaited one by one in the order they
/// complete. Lets a coroutine keep receives or atomics posted ahead of time: on one queue pair, receives
/// complete in the order they were posted (RC), so their tags come back in that order.
///
/// Lifetime: handlers share the state, so a completion arriving after this object is gone is harmless; the
/// buffers the operations use must still outlive them (`drain()` first, once the queue pair is in the error
/// state or every operation is known to complete).
/// @par Thread Safety Use from the executor the operations complete on (the queue pair's).
template <class Value>
class completions {
public:
  static constexpr std::size_t timed_out_tag = SIZE_MAX;  ///< the tag of a `next(deadline)` that timed out

  explicit completions(const asio::any_io_executor& ex) : state_(std::make_shared<state>(ex)) {}

  /// A completion token for one operation with signature `void(error_code, Value)`.
  auto handler(std::size_t tag) {
    ++state_->pending;
    return [s = state_, tag](error_code ec, Value value) {
      s->ready.push_back({ec, tag, std::move(value)});
      s->wake.cancel();
    };
  }

  /// Operations started and not yet taken.
  std::size_t pending() const noexcept { return state_->pending; }

  /// The next completion, waiting for it if none is there yet. Needs `pending() > 0`.
  asio::awaitable<completion<Value>> next() { return next(clock::time_point::max()); }

  /// As `next()`, giving up at `deadline`: the completion then has `ec` = `std::errc::timed_out` and tag
  /// `timed_out_tag`, and the operations stay pending (move the queue pair to the error state, e.g. with
  /// `disconnect_within`, then `drain()`).
  asio::awaitable<completion<Value>> next(clock::time_point deadline) {
    const std::shared_ptr<state> s = state_;
    while (s->ready.empty()) {
      s->wake.expires_at(deadline);
      auto [ec] = co_await s->wake.async_wait(tuple);
      if (!ec && s->ready.empty())
        co_return completion<Value>{error_code(std::make_error_code(std::errc::timed_out)), timed_out_tag};
    }
    completion<Value> c = std::move(s->ready.front());
    s->ready.pop_front();
    --s->pending;
    co_return c;
  }

  /// Takes every pending completion; returns how many of them failed.
  asio::awaitable<std::size_t> drain() {
    std::size_t failed = 0;
    while (pending() > 0) {
      const completion<Value> c = co_await next();
      failed += c.ec ? 1 : 0;
    }
    co_return failed;
  }

private:
  struct state {
    explicit state(const asio::any_io_executor& ex) : wake(ex, clock::time_point::max()) {}
    asio::steady_timer wake;  // expires at the waiter's deadline (never, for next()); cancelled to wake it
    std::deque<completion<Value>> ready;
    std::size_t pending = 0;
  };
  std::shared_ptr<state> state_;
};

// --- the peer and the device: bounded waits, named causes ---

/// How long an example waits for anything its peer must do (a message, an echo, a reply, the answer to a
/// disconnect) before it gives that peer up: generous for a busy emulated guest, short enough that no
/// process hangs on a peer or a port that is gone.
inline constexpr std::chrono::seconds peer_timeout{20};

/// "20 s", for messages.
inline std::string seconds_text(std::chrono::seconds s) { return std::to_string(s.count()) + " s"; }

/// Disconnects `conn` (connection::async_disconnect: its queue pair goes to the error state at once, so its
/// operations flush) and waits at most `limit` for rdma_cm to report the connection closed, which takes the
/// peer's answer, or rdma_cm's retries when the peer or the port is gone (with the queue pair failed by
/// `errc::port_error` it waits 1 s at most: a port that is down carries no answer).
/// @returns the disconnect's error, or `std::errc::timed_out` past `limit` (the disconnect then stays
/// pending; destroying the connection ends it). Needs a non-empty connection.
inline asio::awaitable<error_code> disconnect_within(coverbs::connection& conn,
                                                     std::chrono::milliseconds limit = peer_timeout) {
  if (conn.qp().error() == coverbs::errc::port_error)
    limit = std::min<std::chrono::milliseconds>(limit, std::chrono::seconds(1));
  struct state {
    explicit state(const asio::any_io_executor& ex) : done(ex) {}
    asio::steady_timer done;
    std::optional<error_code> ec;
  };
  const auto s = std::make_shared<state>(conn.get_executor());
  s->done.expires_after(limit);
  conn.async_disconnect([s](error_code ec) {
    s->ec = ec;
    s->done.cancel();
  });
  co_await s->done.async_wait(tuple);
  co_return s->ec ? *s->ec : error_code(std::make_error_code(std::errc::timed_out));
}

/// What ended an operation on `conn` that completed with `ec`, for the report: the queue pair's own error
/// when a device event moved it to the error state (`errc::port_error`, `device_fatal`, `qp_fatal`, ...: the
/// flushed operation's `wr_flush_err` is only the consequence); `errc::port_error` when the connection's port
/// is down now (an operation may fail, e.g. with rxe's `loc_qp_op_err`, before the port event was read);
/// else `ec`. Success stays success.
inline error_code cause(const error_code& ec, const coverbs::connection& conn) {
  if (!ec || !conn) return ec;
  using coverbs::errc;
  const error_code qp = conn.qp().error();
  for (errc e : {errc::port_error, errc::device_fatal, errc::qp_fatal, errc::qp_request_error, errc::qp_access_error,
                 errc::cq_error})
    if (qp == e) return qp;
  const rdma_cm_id* id = conn.native_handle();
  try {
    if (id && id->port_num != 0 && !conn.get_device().query_port(id->port_num).active())
      return coverbs::make_error_code(errc::port_error);
  } catch (const coverbs::system_error&) {  // the device is gone: nothing more to say than `ec`
  }
  return ec;
}

/// The asynchronous events (coverbs::device_events) of the devices this program's listener and connections
/// use, read for as long as the watch exists. With it, a port going down moves every queue pair of this
/// process on that port to the error state at once: their operations flush and `queue_pair::error()` says
/// `errc::port_error` (see `cause`). Without a reader nothing does: a posted receive waits forever, and a
/// send fails only after the transport's retries, as a local error that does not name the port. Each port
/// and fatal event is printed once on stderr, as "`who`: rxe0 port 1 went down (port error) ...".
/// @par Lifetime Destroy it (or `close()` it) before its io_context: a pending read keeps the loop busy.
/// @par Thread Safety Use from its executor.
class device_watch {
public:
  device_watch(asio::any_io_executor ex, std::string who) : ex_(std::move(ex)), who_(std::move(who)) {}
  device_watch(const device_watch&) = delete;
  device_watch& operator=(const device_watch&) = delete;
  ~device_watch() { close(); }

  /// Reads the events of `dev`'s context from now on; once per context (rdma_cm's contexts are shared by
  /// every connection of a process to one device, and a context has one reader), later calls do nothing.
  /// @throws coverbs::system_error as device_events' constructor.
  void watch(coverbs::device& dev) {
    ibv_context* const context = dev.native_handle();
    if (closed_ || !context || readers_.count(context)) return;
    auto r = std::make_shared<reader>(ex_, context, who_);
    readers_.emplace(context, r);
    wait_next(r);
  }

  /// IBV_EVENT_PORT_ERR events seen so far.
  std::size_t ports_down() const noexcept {
    std::size_t n = 0;
    for (const auto& [context, r] : readers_)
      n += r->ports_down;
    return n;
  }

  /// Stops reading (pending reads end with operation_aborted). Idempotent.
  void close() noexcept {
    closed_ = true;
    readers_.clear();
  }

private:
  struct reader {
    reader(const asio::any_io_executor& ex, ibv_context* context, const std::string& w)
        : view(coverbs::device::adopt(context)), events(ex, view), who(w) {}
    coverbs::device view;  // adopted: rdma_cm keeps its contexts open for the life of the process
    coverbs::device_events events;
    std::string who;
    std::size_t ports_down = 0;
  };

  static void wait_next(const std::shared_ptr<reader>& r) {
    r->events.async_wait_event([weak = std::weak_ptr<reader>(r)](error_code ec, coverbs::device_event e) {
      const std::shared_ptr<reader> r = weak.lock();
      if (ec || !r) return;  // closed
      report(*r, e);
      wait_next(r);
    });
  }

  static void report(reader& r, const coverbs::device_event& e) {
    const std::string where = r.view.name() + (e.port_event() ? " port " + std::to_string(e.port) : std::string());
    if (e.type == IBV_EVENT_PORT_ERR) {
      ++r.ports_down;
      std::fprintf(stderr,
                   "%s: %s went down (%s): %zu queue pair(s) of this process moved to the error state "
                   "(errc::port_error), their operations flushed\n",
                   r.who.c_str(), where.c_str(), e.name(), e.queue_pairs_failed);
    } else if (e.type == IBV_EVENT_PORT_ACTIVE) {
      std::fprintf(stderr, "%s: %s is active again (%s)\n", r.who.c_str(), where.c_str(), e.name());
    } else if (e.type == IBV_EVENT_DEVICE_FATAL) {
      std::fprintf(stderr, "%s: %s: %s: every queue pair on it moved to the error state\n", r.who.c_str(),
                   where.c_str(), e.name());
    }
  }

  asio::any_io_executor ex_;
  std::string who_;
  std::map<ibv_context*, std::shared_ptr<reader>> readers_;
  bool closed_ = false;
};

// --- running ---

/// Coroutines spawned on one executor: how many ended, and how many of them by an exception (printed as
/// `who: what`).
struct task_group {
  int started = 0, finished = 0, failed = 0;

  /// Spawns `task` on `where` (an executor or an io_context).
  template <class Where, class Awaitable>
  void spawn(Where&& where, Awaitable task, const char* who) {
    ++started;
    asio::co_spawn(std::forward<Where>(where), std::move(task), [this, who](std::exception_ptr e) {
      ++finished;
      if (!e) return;
      ++failed;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        std::fprintf(stderr, "%s: %s\n", who, x.what());
      }
    });
  }
  bool all_done() const noexcept { return finished == started; }
};

/// How a run went.
struct run_result {
  bool finished = false;  ///< every task ended
  double elapsed_us = 0;
  int signal = 0;  ///< SIGINT or SIGTERM, when one ended the run; 0 otherwise
};

/// "SIGTERM", "SIGINT".
inline const char* signal_name(int signal) {
  return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "a signal";
}

/// Runs `io` until every task of `tasks` has ended; in self-test mode for `limit` at most (a line then says so).
/// SIGINT or SIGTERM ends the run early (`run_result::signal`): the caller still prints its whole report.
inline run_result run_tasks(asio::io_context& io, const task_group& tasks, const command_line& cmd,
                            std::chrono::seconds limit = std::chrono::seconds(40)) {
  const auto start = clock::now();
  asio::signal_set signals(io, SIGINT, SIGTERM);
  int stopped_by = 0;
  signals.async_wait([&stopped_by](const error_code& ec, int signal) {
    if (!ec) stopped_by = signal;
  });
  const auto deadline = cmd.self_test() ? start + limit : clock::time_point::max();
  while (!tasks.all_done() && stopped_by == 0 && clock::now() < deadline) {
    io.restart();
    io.run_for(std::chrono::milliseconds(50));
  }
  signals.cancel();
  if (stopped_by)
    std::printf("  stopped by %s (%d of %d tasks ended)\n", signal_name(stopped_by), tasks.finished, tasks.started);
  else if (!tasks.all_done())
    std::printf("  did not finish within %lld s\n", static_cast<long long>(limit.count()));
  return {tasks.all_done(), us_since(start), stopped_by};
}

/// Prints the elapsed time, then "`what`: OK" or "`what`: FAILED". @returns the exit status, 0 or 1. When the
/// tasks did not all finish (a watchdog or a signal ended the run), exits the process at once instead, with
/// that status (a run a signal ended is OK when all it did held): their coroutines still hold connections on
/// resources of the caller's frame, which must not be unwound in the wrong order.
inline int verdict(const std::string& what, bool ok, const run_result& run) {
  ok = ok && (run.finished || run.signal != 0);
  std::printf("  elapsed          : %.0f us\n%s: %s\n", run.elapsed_us, what.c_str(), ok ? "OK" : "FAILED");
  if (!run.finished) {
    std::fflush(nullptr);
    std::_Exit(ok ? 0 : 1);
  }
  return ok ? 0 : 1;
}

}  // namespace example
