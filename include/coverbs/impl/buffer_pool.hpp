#pragma once
// Internal: the template bodies of buffer_pool.hpp (included at its end). Not part of the public API.

#include <coverbs/detail/token_check.hpp>
#include <coverbs/detail/pool_state.hpp>

#include <boost/asio/compose.hpp>
#include <boost/asio/post.hpp>

#include <memory>
#include <optional>
#include <span>

namespace coverbs {

struct buffer_pool::allocate_op {
  registration_service* service;
  protection_domain* pd;
  std::shared_ptr<detail::pool_state> state;
  std::size_t size;
  std::span<std::byte> arena{};
  std::optional<registered_buffer> got{};
  error_code error{};
  enum { starting, delivering, registering } phase = starting;

  template <typename Self>
  void operator()(Self& self, error_code ec = {}, shared_region registration = {}) {
    switch (phase) {
    case starting:
      got = state->try_allocate(size, false);
      if (!got) arena = state->map_arena_for(size, error);
      if (got || error) {
        phase = delivering;
        boost::asio::post(std::move(self)); // complete outside the initiating call
        return;
      }
      phase = registering;
      reg_shared(*service, *pd, arena, state->rights(), std::move(self));
      return;
    case registering:
      state->add_arena(arena, registration, false);
      error = ec;
      if (!ec) got = state->try_allocate(size, false);
      if (!got && !error) error = make_error_code(errc::pool_exhausted);
      break;
    case delivering: break;
    }
    self.complete(error, got ? std::move(*got) : registered_buffer{});
  }
};

template <completion_token_or_handler<void(error_code, registered_buffer)> CompletionToken>
auto buffer_pool::async_allocate(std::size_t size, CompletionToken&& token) {
  if constexpr (detail::token_fits<CompletionToken, void(error_code, registered_buffer)>())
    return boost::asio::async_compose<CompletionToken, void(error_code, registered_buffer)>(
        allocate_op{&service_, &pd_, state_, size}, token, service_.get_executor());
}

}  // namespace coverbs
