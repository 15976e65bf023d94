#pragma once
/// @file
/// `registrar`: the memory-registration verbs a `registration_service`'s workers run (ibv_reg_mr(3),
/// ibv_dereg_mr(3), ibv_rereg_mr(3)), replaceable — tests inject a fake.

#include <coverbs/access.hpp>
#include <coverbs/error.hpp>

#include <infiniband/verbs.h>

#include <cstddef>
#include <memory>
#include <span>

namespace coverbs {

/// The verbs the workers run, replaceable (tests inject a fake). Implementations are called from worker
/// threads, concurrently, and report errors as plain errno codes (the service classifies them).
class registrar {
public:
  virtual ~registrar() = default;
  /// ibv_reg_mr(3): returns the region, or nullptr with `ec` set.
  virtual ibv_mr* reg_mr(ibv_pd* pd, std::span<std::byte> buffer, access rights, error_code& ec) noexcept = 0;
  /// ibv_dereg_mr(3).
  virtual error_code dereg_mr(ibv_mr* mr) noexcept = 0;
  /// ibv_rereg_mr(3) with IBV_REREG_MR_CHANGE_* `flags`; `still_valid` says whether `mr` survived a failure.
  virtual error_code rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, std::span<std::byte> buffer, access rights,
                              bool& still_valid) noexcept = 0;
};

/// The registrar that calls libibverbs (the default).
std::shared_ptr<registrar> verbs_registrar();

}  // namespace coverbs
