#pragma once
/// @file
/// Internals of registration_service.hpp: the per-request state machine, the accounting shared by the
/// service and the registrations it hands out, and the worker-side core. Not a stable interface.

#include <coverbs/access.hpp>
#include <coverbs/error.hpp>

#include <boost/asio/thread_pool.hpp>

#include <infiniband/verbs.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

namespace coverbs {

class registrar;
struct registration_options;
struct registration_stats;

/// How `rereg` changed a region.
enum class rereg_method : std::uint8_t {
  /// ibv_rereg_mr(3) changed the region in place (same ibv_mr, new keys).
  in_place,
  /// The provider answered EOPNOTSUPP (rxe does): a new region was registered, then the old one deregistered.
  reregistered,
};

namespace detail {

/// posted → running → completed | failed | cancelled; `cancel_requested` is "running, and the caller has
/// cancelled": the worker's result is then thrown away (and what it registered deregistered).
enum class request_state : std::uint8_t { posted, running, cancel_requested, completed, failed, cancelled };

enum class request_kind : std::uint8_t { reg, reg_shared, dereg, rereg };

/// Counters and the registrar, shared by the core and every shared registration it produced, so a shared
/// registration can deregister itself after the service is gone.
struct accounting {
  std::shared_ptr<registrar> verbs;
  std::atomic<std::uint64_t> registered{0}, deregistered{0}, handed_over{0}, taken_back{0};
  std::atomic<std::int64_t> bytes_held{0};
  std::atomic<std::uint64_t> shared_live{0}, completed{0}, failed{0}, cancelled{0}, retries{0}, merged{0},
      merges_split{0};
  std::atomic<std::uint64_t> rereg_in_place{0}, rereg_fallbacks{0}, in_flight{0};
  std::atomic<std::uint64_t> cancels_queued{0}, cancels_running{0}, cancels_late{0};

  /// Runs the registrar's reg_mr and counts a success.
  ibv_mr* reg(ibv_pd* pd, std::span<std::byte> buffer, access rights, error_code& ec) noexcept;
  /// Counts `mr`, a registration reg made (or nothing), and returns it.
  ibv_mr* counted(ibv_mr* mr) noexcept;
  /// Runs the registrar's dereg_mr and counts a success.
  error_code dereg(ibv_mr* mr) noexcept;
};

class cache_state;

/// One registration shared by several holders (batch mode, the cache). Deregistered when the last holder
/// lets go, on that holder's thread.
class shared_mr {
public:
  shared_mr(std::shared_ptr<accounting> acct, ibv_mr* mr, access rights) noexcept;
  shared_mr(const shared_mr&) = delete;
  shared_mr& operator=(const shared_mr&) = delete;
  ~shared_mr();

  ibv_mr* native_handle() const noexcept { return mr_; }
  access rights() const noexcept { return rights_; }
  std::byte* data() const noexcept { return static_cast<std::byte*>(mr_->addr); }
  std::size_t size() const noexcept { return mr_->length; }
  /// Set when the memory under the registration changed (unmapped, remapped, returned to the system), as far
  /// as the cache has applied its monitor's events; `valid()` applies them first.
  bool invalidated() const noexcept { return invalidated_.load(std::memory_order_acquire); }
  void invalidate() const noexcept { invalidated_.store(true, std::memory_order_release); }
  /// Ties the registration to the cache whose userfaultfd monitor watches its memory, so `valid()` can apply
  /// that monitor's queued events. Set once, by the first cache that indexes it with its memory watched (a
  /// page can be watched by one userfaultfd only). Any thread (lib/registration_cache.cpp).
  void link(const std::shared_ptr<cache_state>& cache) const noexcept;
  /// Not invalidated, once the events the linked cache's monitor has read are applied: an unmapping call
  /// (munmap, mmap MAP_FIXED, mremap, madvise DONTNEED) that returned before this call is seen. Takes the
  /// cache's lock only when events are queued; may then deregister unused cache entries whose memory went
  /// away, on the calling thread. Any thread (lib/registration_cache.cpp).
  bool valid() const noexcept;

private:
  std::shared_ptr<accounting> acct_;
  ibv_mr* mr_;
  access rights_;
  mutable std::atomic<bool> invalidated_{false};
  mutable std::atomic<int> link_state_{0};   // 0: no cache, 1: being linked, 2: `cache_` set (then immutable)
  mutable std::weak_ptr<cache_state> cache_; // weak: handles outlive the cache
};

class registration_core;

/// A request's state and data; the handler lives in the derived `request_op` (impl/).
struct request {
  /// Deregisters a region the request still owns (its handler was destroyed without running).
  virtual ~request();
  /// Posts the handler to its executor with the outcome. Called exactly once, from any thread.
  virtual void complete(std::shared_ptr<request> self) noexcept = 0;

  request_kind kind = request_kind::reg;
  std::atomic<request_state> state{request_state::posted};
  std::weak_ptr<registration_core> core;
  std::shared_ptr<accounting> acct;
  // inputs
  ibv_pd* pd = nullptr;
  std::span<std::byte> buffer;
  access rights = access::none;
  int rereg_flags = 0;
  ibv_mr* mr = nullptr;            // dereg/rereg: the region (owned by the request); reg: the result
  access mr_rights = access::none; // rights of `mr`
  // outputs
  error_code ec;
  std::shared_ptr<shared_mr> shared; // reg_shared: the registration serving this request
  rereg_method method = rereg_method::in_place;
  std::list<std::shared_ptr<request>>::iterator in_flight_pos;
  bool listed = false; // in the core's in-flight list (guarded by its mutex)
  std::list<std::shared_ptr<request>>::iterator queue_pos;
  bool queued = false; // in the core's queue of requests no worker has taken yet (guarded by its mutex)
};

/// The worker side: the thread pool, the requests in flight and the batch queue. Thread-safe.
class registration_core : public std::enable_shared_from_this<registration_core> {
public:
  registration_core(std::shared_ptr<registrar> verbs, const registration_options& options);
  ~registration_core();

  /// Queues `r` (or completes it with operation_aborted when the service is shut down).
  /// For reg_shared, returns true when the caller must post a `kick()` to its executor (the batch of
  /// this turn of the caller's loop then goes to the workers as one).
  bool submit(const std::shared_ptr<request>& r);
  /// Sends queued reg_shared requests to the workers.
  void kick();
  /// The slot's cancellation: see registration_service.hpp.
  void cancel(const std::shared_ptr<request>& r) noexcept;
  /// Completes every request in flight with operation_aborted and joins the workers.
  void shutdown() noexcept;
  registration_stats stats() const noexcept;
  /// Test seam: when set, stats() calls it between reading the regions gone and the regions come (so a test
  /// can register and hand over a region in the middle of a read, deterministically). Null outside tests.
  static inline void (*pause_in_stats)() = nullptr;
  const std::shared_ptr<accounting>& acct() const noexcept { return acct_; }

private:
  void run(const std::shared_ptr<request>& r) noexcept;
  /// A worker's turn: takes the oldest queued request (if a cancellation left any) and runs it.
  void run_next() noexcept;
  /// Applies the worker scheduling policy to the calling worker (once per thread).
  void enter_worker() const noexcept;
  void run_shared_batch() noexcept;
  /// ibv_reg_mr with the retry policy; classifies the final error.
  ibv_mr* register_with_retry(request& r, ibv_pd* pd, std::span<std::byte> buffer, access rights,
                              error_code& ec) noexcept;
  void do_rereg(request& r) noexcept;
  /// running → completed/failed, or → cancelled when a cancel arrived meanwhile; then completes.
  void settle(const std::shared_ptr<request>& r) noexcept;
  /// Removes `r` from the in-flight list, counts the outcome and completes it.
  void finish(const std::shared_ptr<request>& r) noexcept;

  std::shared_ptr<accounting> acct_;
  unsigned attempts_;
  std::chrono::microseconds first_backoff_, max_backoff_;
  unsigned multiplier_;
  int scheduling_policy_; // SCHED_* or -1 for none
  mutable std::mutex mutex_;
  bool stopped_ = false;
  bool kick_pending_ = false;
  std::list<std::shared_ptr<request>> in_flight_;
  /// reg, dereg and rereg requests no worker has taken yet. The pool gets one `run_next` per request rather
  /// than the request itself, so a cancelled request leaves the queue (and is freed) at once.
  std::list<std::shared_ptr<request>> queue_;
  std::vector<std::shared_ptr<request>> shared_queue_;
  boost::asio::thread_pool pool_;
  /// Its enrollment in coverbs::metrics::read() (the counters of `acct_`); last, so it goes first.
  std::shared_ptr<void> metrics_;
};

} // namespace detail
} // namespace coverbs
