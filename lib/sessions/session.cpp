// A session: a connection and the message endpoint made before it was established (connection_options::prepare),
// the leases it keeps, and its closing in order.
#include <coverbs/session.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/assert.hpp>

#include <cerrno>

namespace coverbs {

namespace asio = boost::asio;

// Destroyed as close_steps closes, without waiting: the leases revoked first, then the endpoint's operations
// ended (its slots still registered) and the queue pair moved to the error state (from then on nothing the peer
// sends lands), then the slots deregistered, then the connection with its queue pair and domain.
struct session::state {
  connection conn;
  std::shared_ptr<message_endpoint> endpoint;
  std::vector<window_lease> leases;
  ~state() {
    for (window_lease& l : leases)
      l.revoke();
    if (!endpoint) return;
    endpoint->shutdown();
    if (conn) {
      ibv_qp_attr attr{};
      attr.qp_state = IBV_QPS_ERR;
      error_code ignored;  // a queue pair the device cannot move is destroyed with the connection all the same
      conn.qp().modify(attr, IBV_QP_STATE, ignored);
    }
    endpoint->close();
  }
};

connection_options session_connection_options(connection_options base, const message_options& messages) {
  base.prepare = [messages](queue_pair& qp, protection_domain& pd) -> std::shared_ptr<void> {
    return std::make_shared<message_endpoint>(pd, qp, messages, message_endpoint::hold_sends);
  };
  return base;
}

session::session(connection c) {
  if (!c || !c.prepared())
    throw system_error(make_error_code(errc::not_a_session_connection),
                       "session(connection): accept or connect it with session_connection_options");
  state_ptr s(new state);
  s->endpoint = std::static_pointer_cast<message_endpoint>(c.prepared());
  s->conn = std::move(c);
  // On the endpoint's executor (the handler that made the session may run elsewhere).
  asio::dispatch(s->conn.get_executor(), [ep = s->endpoint] { ep->start_sending(); });
  state_ = std::move(s);
}

void session::state_deleter::operator()(state* s) const noexcept { delete s; }

session::session(session&&) noexcept = default;
session& session::operator=(session&&) noexcept = default;
session::~session() = default;

session::executor_type session::get_executor() const noexcept {
  return state_ ? state_->conn.get_executor() : executor_type();
}
message_endpoint& session::endpoint() const noexcept {
  BOOST_ASSERT_MSG(state_, "session::endpoint() on an empty session");
  return *state_->endpoint;
}
connection& session::conn() const noexcept {
  BOOST_ASSERT_MSG(state_, "session::conn() on an empty session");
  return state_->conn;
}

window_lease& session::keep(window_lease lease) { return state_->leases.emplace_back(std::move(lease)); }

error_code session::error() const noexcept {
  if (!state_) return errno_code(ENOTCONN);
  if (const error_code ec = state_->conn.error()) return ec;
  const error_code ec = state_->endpoint->error();
  return ec == errc::endpoint_closed ? error_code() : ec;
}

std::string session::diagnostic() const { return state_ ? state_->endpoint->diagnostic() : std::string(); }

asio::awaitable<error_code> session::close_steps(state_ptr s) {
  if (!s) co_return errno_code(ENOTCONN);
  constexpr auto with_ec = asio::as_tuple(asio::use_awaitable);
  error_code first;
  for (window_lease& l : s->leases) {
    if (!l) continue;
    auto [ec] = co_await l.async_revoke(with_ec);
    if (ec && !first) first = ec;
  }
  s->leases.clear();
  // The endpoint's operations end first, but its slots stay registered until the queue pair left RTS (the
  // disconnect moves it to the error state): a message the peer sends meanwhile lands in registered memory
  // and is dropped, instead of failing both queue pairs with a protection error.
  s->endpoint->shutdown();
  if (s->conn.connected()) {
    auto [ec] = co_await s->conn.async_disconnect(with_ec);
    if (ec && !first) first = ec;
  }
  s->endpoint->close();
  co_return first;
}

error_code detail::code_of(const std::exception_ptr& e) noexcept {
  try {
    std::rethrow_exception(e);
  } catch (const boost::system::system_error& x) {
    return x.code();
  } catch (...) {
    return make_error_code(errc::session_handler_threw);
  }
}

}  // namespace coverbs
