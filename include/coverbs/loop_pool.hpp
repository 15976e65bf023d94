#pragma once
/// @file
/// `loop_pool`: several event loops, each an `asio::io_context` run by its own thread, each (given a
/// device) with its own completion queue, and a protection domain shared by all or one per loop. The
/// shape of Asio's io_context_pool example (HTTP server 2), for RDMA: spreading queue pairs over several
/// completion queues on several cores is what scales a server (one completion queue per 2-4 cores is the
/// usual advice; one loop per core is the default here).
///
/// ```cpp
/// coverbs::listener l(io.get_executor(), "10.77.0.1", 7471);
/// coverbs::loop_pool pool(l.get_device(), {.loops = 4});
/// pool.run();
/// for (;;) {
///   auto& m = pool.least_loaded();
///   auto options = m.connection_options();  // m's domain and queue, and a lease
///   auto ex = m.get_executor();
///   coverbs::connection c = co_await l.async_accept(ex, options);
///   auto where = c.get_executor();  // m's, or another member's (below)
///   co_spawn(where, serve(std::move(c)), detached);  // runs on that member's thread from here on
/// }
/// ```
///
/// The connection is usually on `m`, but may be on another member of the pool: a requester handshaken for
/// an earlier accept that another requester completed (listener::async_accept) completes the next accept
/// with options of this pool whichever member it named, and stays on the member that made it (its
/// executor, completion queue, domain and lease; the named member's lease goes with the accept). So run
/// what serves it on `c.get_executor()`.
///
/// Per-member state: `emplace_state<T>(make)` makes one `T` per member, on that member's thread (for what
/// must live on one loop: a `window_pool`, a cache of connections, counters), and a coroutine running
/// there reaches it with `pool.current()->state<T>()`.
///
/// Placement: `next()` takes the members in turn; `least_loaded()` the one with the fewest leases alive
/// (a lease is taken by `member::connection_options()` and held by the connection until it closes, or
/// taken with `member::lease()` for queue pairs of your own).
///
/// Why "loop": the rest of coverbs calls an executor's io_context "the loop"; a pool member is a loop
/// plus the completion queue its queue pairs must use.
///
/// @par Thread Safety
/// `next()`, `least_loaded()`, `size()`, `operator[]`, `pd()`, `emplace_state()`, the members' accessors and
/// `lease()` may be called from any thread; `member::state()` / `find_state()` from that member's thread. `run()`, `stop()`, `join()` and the destructor from one thread at a time,
/// never from a member's own thread (`join()` would wait for itself). A member's completion queue, and the
/// queue pairs and connections on it, are used from that member's executor only; the shared protection
/// domain and the device may be used from every member (see docs/programming-model.md for the table).

#include <coverbs/completion_queue.hpp>
#include <coverbs/detail/placement_options.hpp>
#include <coverbs/device.hpp>
#include <coverbs/protection_domain.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <typeindex>
#include <typeinfo>
#include <utility>
#include <vector>

namespace coverbs {

/// How a loop_pool is made.
struct loop_pool_options {
  /// Number of loops (threads); 0: `std::thread::hardware_concurrency()` (1 when unknown).
  unsigned loops = 0;
  /// Each member's completion queue (with a device). `depth` bounds the queue pairs a member takes:
  /// each reserves its max_send_wr + max_recv_wr entries (`errc::cq_overcommitted` beyond).
  completion_queue_options cq = {};
  /// true: one protection domain per member; false: one shared by every member (verbs objects of one
  /// domain may be created and used from several threads: libibverbs serializes what needs it).
  bool pd_per_loop = false;
};

/// N loops on N threads. Neither copyable nor movable (members are referenced by address).
///
/// Lifetime: the device outlives the pool. Destruction stops the loops, joins the threads, then destroys
/// every handler still queued on a member (coroutine frames included: connections and queue pairs held
/// there are destroyed then, while the completion queues and domains still exist), then the completion
/// queues, the domains and the io_contexts. Connections or queue pairs on a member held *outside* its
/// loop must be destroyed before the pool, and so must those held by a coroutine suspended on one of
/// their operations: that coroutine is owned by the work request, not by the loop. So must a listener with
/// accepts placed on the pool (pending, or requesters being handshaken): its handshakes end on the members.
class loop_pool {
public:
  using executor_type = boost::asio::any_io_executor;

  /// One loop of the pool.
  class member {
  public:
    member(const member&) = delete;
    member& operator=(const member&) = delete;

    /// Position in the pool, 0 .. size()-1.
    std::size_t index() const noexcept { return index_; }
    boost::asio::io_context& context() noexcept { return *io_; }
    executor_type get_executor() const noexcept { return io_->get_executor(); }
    /// The member's completion queue, serviced by its executor. Needs a pool made with a device.
    completion_queue& cq() noexcept { return *cq_; }
    /// The protection domain of this member (the shared one unless `pd_per_loop`). Needs a device.
    protection_domain& pd() noexcept { return *pd_; }
    bool has_device() const noexcept { return cq_.has_value(); }
    /// The thread running this member; a default id when it is not running (before `run()`, after
    /// `join()`).
    std::thread::id thread_id() const noexcept { return thread_id_.load(std::memory_order_acquire); }
    /// Leases alive: what `least_loaded()` compares.
    std::size_t load() const noexcept { return load_->load(std::memory_order_relaxed); }
    /// Counts one placement on this member until the last copy of the returned pointer is destroyed.
    std::shared_ptr<void> lease();
    /// `base` with this member's protection domain, completion queue and a lease: the options for
    /// `listener::async_accept(get_executor(), ...)` or `async_connect(get_executor(), ...)`. `Options` is any
    /// type with members `pd`, `cq` and `lease`; named none, `coverbs::connection_options` (defined by
    /// coverbs/connection_options.hpp, which the caller includes, e.g. through coverbs/cm.hpp: the pool itself
    /// does not depend on rdma_cm).
    template <class Options = detail::default_placement>
    auto connection_options(Options base = {}) {
      if constexpr (std::is_same_v<Options, detail::default_placement>) {
        return connection_options(typename detail::placement_options<Options>::type());
      } else {
        base.pd = &pd();
        base.cq = &cq();
        base.lease = lease();
        return base;
      }
    }

    /// This member's `T`, made by `loop_pool::emplace_state<T>`, or null when there is none (yet). From the
    /// member's own thread (a handler or coroutine running on it), or while the pool is not running.
    template <class T>
    T* find_state() noexcept {
      for (auto& [type, p] : states_)
        if (type == std::type_index(typeid(T))) return static_cast<T*>(p.get());
      return nullptr;
    }
    /// As `find_state`, but a missing state is an error.
    /// @throws std::logic_error naming the type and the member when it has no such state.
    template <class T>
    T& state() {
      if (T* p = find_state<T>()) return *p;
      throw std::logic_error(std::string("loop_pool member ") + std::to_string(index_) + " has no state of type " +
                             typeid(T).name() + ": call loop_pool::emplace_state<T> first (handlers posted to the " +
                             "member after it returns see the state)");
    }

  private:
    friend class loop_pool;
    /// An io_context whose queued handlers the pool can destroy before the completion queue goes.
    struct loop_context : boost::asio::io_context {
      loop_context() : boost::asio::io_context(1) {}
      void destroy_handlers() { shutdown(); }
    };
    member(std::size_t index, device* dev, protection_domain* shared_pd, const loop_pool_options& options);

    std::size_t index_;
    const loop_pool* pool_ = nullptr;  ///< named by its leases (which pool a placement belongs to)
    std::unique_ptr<loop_context> io_;
    std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
    std::optional<protection_domain> own_pd_;
    protection_domain* pd_ = nullptr;
    std::optional<completion_queue> cq_;
    std::thread thread_;
    std::atomic<std::thread::id> thread_id_{};
    /// From `run()` until the member's `io_context::run()` returned on its thread: while set, only that thread
    /// reads the member's objects (describe_outstanding_work asks it there).
    std::atomic<bool> running_{false};
    std::shared_ptr<std::atomic<std::size_t>> load_ = std::make_shared<std::atomic<std::size_t>>(0);
    /// Per-member user state by type, made and used on the member's thread; destroyed by the pool's destructor.
    std::vector<std::pair<std::type_index, std::shared_ptr<void>>> states_;

  public:
    ~member();
  };

  /// Loops only: no completion queues or domains (`member::has_device()` is false), for code that
  /// brings its own.
  explicit loop_pool(const loop_pool_options& options = {});
  /// Loops with a completion queue each (and domains) on `dev`. For connections, use the listener's
  /// or connection's device (`listener::get_device()`): rdma_cm's verbs context, in which the queue
  /// pairs are created.
  /// @throws system_error with the errno of ibv_alloc_pd / ibv_create_comp_channel / ibv_create_cq.
  explicit loop_pool(device& dev, const loop_pool_options& options = {});
  loop_pool(const loop_pool&) = delete;
  loop_pool& operator=(const loop_pool&) = delete;
  ~loop_pool();

  std::size_t size() const noexcept { return members_.size(); }
  member& operator[](std::size_t i) noexcept { return *members_[i]; }

  /// Round robin: each call the next member.
  member& next() noexcept;
  /// The member with the fewest leases alive; ties go round robin.
  member& least_loaded() noexcept;
  /// The member whose thread calls this, or null (e.g. from a thread outside the pool).
  member* current() noexcept;

  /// The protection domain every member shares, without taking a lease: to register memory or make a
  /// `window_pool` for all members. Any thread.
  /// @throws std::logic_error when the pool has no device, or has one domain per member (`pd_per_loop`:
  /// use `member::pd()`).
  protection_domain& pd();

  /// Makes one `T` per member by calling `make(member&)` on that member's thread (posted: it returns at once;
  /// a member that is not running makes its `T` once `run()` starts it). Handlers and coroutines posted or
  /// spawned on a member after this returns run after the `T` is made, and reach it with
  /// `member::state<T>()` (from a coroutine: `pool.current()->state<T>()`). A second `emplace_state<T>`
  /// replaces a member's `T`. The states are destroyed by the pool's destructor, after its threads have
  /// stopped and the handlers still queued are gone, before the completion queues and domains, on the thread
  /// that destroys the pool. An exception from `make` ends the process, as any handler's (see `run()`).
  template <class T, class Make>
  void emplace_state(Make make) {
    for (auto& m : members_) {
      boost::asio::post(m->get_executor(), [mp = m.get(), make]() mutable {
        std::shared_ptr<void> p = std::make_shared<T>(make(*mp));
        for (auto& [type, q] : mp->states_)
          if (type == std::type_index(typeid(T))) {
            q = std::move(p);
            return;
          }
        mp->states_.emplace_back(std::type_index(typeid(T)), std::move(p));
      });
    }
  }

  /// Starts one thread per member running its io_context (members already running are left alone) and
  /// returns. A work guard keeps every member's `run()` from returning while it is idle, until `stop()`.
  /// A handler that throws ends the process (std::terminate), as an exception leaving a std::thread does.
  /// @throws std::system_error when a thread cannot be started (those started keep running).
  void run();
  /// Stops every loop (io_context::stop): their threads return soon, handlers not yet run stay queued.
  /// `run()` restarts them.
  void stop() noexcept;
  /// Waits for every member's thread to return (after `stop()`). `run(); join();` is the Asio example's
  /// blocking `run()`.
  void join() noexcept;

  /// "What keeps the pool busy?": `describe_outstanding_work(member.context())` (outstanding_work.hpp) of every
  /// member, each asked on its own thread, under a `member N:` heading. A running member that does not answer
  /// within `patience` (its thread is stuck in a handler, or stopped) is reported as such instead; a member
  /// not running is read from this thread. Call it from any thread but a member's own (there, use
  /// `describe_outstanding_work(member.context())`).
  /// @throws std::logic_error when called from a member's thread (it would wait for itself).
  std::string describe_outstanding_work(std::chrono::milliseconds patience = std::chrono::seconds(1));

private:
  std::optional<protection_domain> shared_pd_;
  std::vector<std::unique_ptr<member>> members_;
  std::atomic<std::size_t> next_{0};
};

}  // namespace coverbs
