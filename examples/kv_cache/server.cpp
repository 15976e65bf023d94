// kv_cache server: values in registered memory, put by a bulk call (the server reads the client's window), got by
// RDMA read through a window leased to each client alone; a put over a stored key evicts the old value by
// invalidating every client's window over it before it answers. A value lives until the last key over it is dead
// (each lease holds it), so no read ever reaches freed memory, whatever the order of puts, gets and session ends.
#include "kv_cache/kv_cache.hpp"

#include <algorithm>
#include <list>
#include <map>
#include <memory>

namespace kv {

namespace {

constexpr auto value_rights = cv::access::local_write | cv::access::remote_read | cv::access::mw_bind;

struct value {  // one stored value, registered once
  std::vector<std::byte> bytes;
  cv::memory_region mr;
  value(cv::protection_domain& pd, std::size_t n) : bytes(n), mr(pd, bytes, value_rights) {}
};

using client = std::map<std::string, std::shared_ptr<cv::window_lease>>;  // the windows leased to a session, by key

class cache : public std::enable_shared_from_this<cache> {
public:
  explicit cache(cv::listener& l) : pd(l.get_device()), cq(l.get_executor(), l.get_device()), windows_(pd) {}
  cv::protection_domain pd;  // one domain and queue for every session: the values are bound through each
  cv::completion_queue cq;

  asio::awaitable<void> serve(cv::session& s) {
    const auto self = shared_from_this();  // the cache outlives each of its sessions
    auto me = clients_.emplace(clients_.end());
    std::shared_ptr<void> bye(nullptr, [this, me](void*) { clients_.erase(me); });  // its leases revoked
    for (;;) {  // (if/else, not co_await on a conditional expression: GCC 12 miscompiles that)
      cv::inbound_request req = co_await s.endpoint().async_receive_request(asio::use_awaitable);
      if (req.str().starts_with('G'))
        co_await get(s, *me, std::move(req));
      else
        co_await put(s, std::move(req));
    }
  }

private:
  asio::awaitable<void> put(cv::session& s, cv::inbound_request req) {
    const cv::bulk_request bulk = cv::parse_bulk_request(req.bytes());
    const std::string key(text(bulk.payload).substr(1));
    auto v = std::make_shared<value>(pd, std::min<std::uint64_t>(bulk.descriptor.key.length, max_value));
    auto [ec, n] = co_await cv::async_bulk_read(s.qp(), bulk.descriptor, cv::span_of(v->mr), tuple);
    if (!ec) store_[key] = std::move(v);  // the gets from now on see the new value;
    if (!ec) co_await evict(key);          // every window granted before is over an older one
    const std::string why = ec ? ec.message() : std::string();
    co_await s.endpoint().async_reply(req, asio::buffer(why), asio::use_awaitable);
  }

  asio::awaitable<void> get(cv::session& s, client& c, cv::inbound_request req) {
    const std::string key(req.str().substr(1));
    std::array<std::byte, cv::bulk_descriptor::wire_size> reply{};
    std::shared_ptr<value> v = store_.contains(key) ? store_[key] : nullptr;
    if (v) {
      auto lease = std::make_shared<cv::window_lease>(co_await windows_.async_lease(
          s.qp(), v->mr, {}, cv::access::remote_read, {}, asio::use_awaitable));
      lease->async_hold([v](cv::error_code) {});  // the value lives until this key is dead
      if (store_[key] != v) v = nullptr;           // replaced meanwhile: not handed out (the key dies here)
      if (v) reply = cv::bulk_descriptor::of(*lease, cv::access::remote_read).encode();
      if (v && c[key]) c[key]->revoke();  // a second get replaces the client's window
      if (v) c[key] = std::move(lease);
    }
    co_await s.endpoint().async_reply(req, std::span(reply).first(v ? reply.size() : 0), asio::use_awaitable);
  }

  // Every client's window over key dies (the windows are taken at once, before any other request runs).
  asio::awaitable<void> evict(const std::string& key) {
    std::vector<std::shared_ptr<cv::window_lease>> dying;
    for (client& c : clients_)
      if (auto n = c.extract(key)) dying.push_back(std::move(n.mapped()));
    for (auto& lease : dying)
      co_await lease->async_revoke(tuple);
  }

  cv::window_pool windows_;
  std::map<std::string, std::shared_ptr<value>> store_;
  std::list<client> clients_;
};

}  // namespace

asio::awaitable<void> serve(cv::listener& l, std::function<void(const cv::session_report&)> on_end) {
  auto c = std::make_shared<cache>(l);  // each session holds it too (cache::serve): it outlives every session
  cv::server_options o;
  o.session = session_options();
  o.session.connection.pd = &c->pd;
  o.session.connection.cq = &c->cq;
  o.on_end = std::move(on_end);
  co_await cv::async_serve(
      l, [p = c.get()](cv::session& s) { return p->serve(s); }, o, asio::use_awaitable);
}

}  // namespace kv
