#pragma once
/// @file
/// `protection_domain`: the owner of an `ibv_pd`. Regions, windows and queue pairs belong to one
/// protection domain, and a remote key works only through a queue pair of the same domain (IBA 10.2.3).

#include <coverbs/error.hpp>

#include <infiniband/verbs.h>

namespace coverbs {

class device;

/// Move-only owner of a protection domain (`ibv_alloc_pd` / `ibv_dealloc_pd`).
///
/// Lifetime: the device must outlive the domain, and the domain must outlive every region, window and
/// queue pair allocated in it (`ibv_dealloc_pd` answers EBUSY otherwise; the destructor then leaks the
/// domain rather than crash, and says so on stderr).
///
/// @par Thread Safety
/// Distinct objects: safe. Shared objects: may be shared across loops (threads): creating regions,
/// windows and queue pairs in one domain from several threads at once is safe (ibv_reg_mr / ibv_create_qp
/// / ibv_alloc_mw take a `ibv_pd*` and libibverbs and the kernel serialize what needs it), and the const
/// accessors only read a pointer fixed at construction. Moving, `close()` and destruction are unsafe while
/// another thread uses the domain. `loop_pool` shares one domain across its members by default.
class protection_domain {
public:
  /// An empty domain (`native_handle() == nullptr`).
  protection_domain() noexcept = default;

  /// Allocates a protection domain on `dev`.
  /// @throws system_error with the errno of ibv_alloc_pd(3) (ENOMEM when the device's max_pd is reached).
  explicit protection_domain(device& dev);
  /// As above; on failure sets `ec` and leaves the domain empty.
  protection_domain(device& dev, error_code& ec) noexcept;

  protection_domain(protection_domain&& other) noexcept;
  protection_domain& operator=(protection_domain&& other) noexcept;
  protection_domain(const protection_domain&) = delete;
  protection_domain& operator=(const protection_domain&) = delete;
  ~protection_domain();

  /// The underlying `ibv_pd`, for verbs coverbs does not wrap; still owned by this object.
  ibv_pd* native_handle() const noexcept { return pd_; }
  /// The device context the domain lives on.
  ibv_context* context() const noexcept { return pd_ ? pd_->context : nullptr; }
  explicit operator bool() const noexcept { return pd_ != nullptr; }

  /// Deallocates now. @throws system_error with the errno of ibv_dealloc_pd(3) (EBUSY: objects still live).
  void close();
  /// As above, reporting through `ec`; on EBUSY the domain stays open.
  void close(error_code& ec) noexcept;

private:
  ibv_pd* pd_ = nullptr;
};

}  // namespace coverbs
