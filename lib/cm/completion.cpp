// How the rdma_cm operations end: completing an accept or connect, and the error of a caught exception.

#include "cm/completion.hpp"

#include <cerrno>
#include <new>

namespace coverbs::detail {

void connection_completion::complete(error_code ec, connection c, bool post) {
  if (!c) c = connection(peer);
  if (handler) deliver(std::move(handler), io_ex, post, ec, std::move(c));
}

error_code current_error() noexcept {
  try {
    throw;
  } catch (const system_error& e) {
    return e.code();
  } catch (const std::bad_alloc&) {
    return errno_code(ENOMEM);
  } catch (...) {
    return make_error_code(errc::unspecified_verbs_failure);
  }
}

}  // namespace coverbs::detail
