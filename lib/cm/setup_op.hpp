#pragma once
// Private to lib/: what a connection being set up reports to when the setup ends — the `connect_op` of
// async_connect (active side), or a listener's `handshake_op` (passive side). The connection holds it while
// the setup runs (`connection_impl::op_`) and hands it the result once.

#include <coverbs/error.hpp>

#include <chrono>
#include <memory>

namespace coverbs::detail {

class connection_impl;

class setup_op {
public:
  virtual ~setup_op() = default;
  /// The connection `c` is established. On the connection's executor.
  virtual void established(std::shared_ptr<connection_impl> c) = 0;
  /// The setup failed with `ec`; the connection is closed already. On the connection's executor; `post`: the
  /// caller is an initiating function or a cancellation, so no handler may run inline.
  virtual void failed(error_code ec, bool post) = 0;
  /// Passive side: how long the requester may take, once accepted, to finish the handshake; zero: no limit.
  virtual std::chrono::milliseconds establish_timeout() const noexcept { return std::chrono::milliseconds(0); }
};

}  // namespace coverbs::detail
