// kv_cache client: puts a value larger than a slot by a bulk call, gets it back by RDMA read through the window the
// server leased to it, replaces it (the server evicts the old value), finds the old key dead, connects again and
// gets the new value.
#include "kv_cache/kv_cache.hpp"

namespace kv {

// A session, and a region and windows on its domain (the value to put, then the value read). Destroyed in reverse
// order: the windows and the region go before the session closes (without waiting) and frees its domain.
struct link {
  cv::session s;
  std::vector<std::byte> memory;
  cv::memory_region mr;
  cv::window_pool windows;
  link(cv::session session, std::size_t size)
      : s(std::move(session)), memory(2 * size),
        mr(s.pd(), memory, cv::access::local_write | cv::access::remote_read | cv::access::mw_bind), windows(s.pd()) {}

  asio::awaitable<void> put(const std::string& key, const std::vector<std::byte>& value) {
    std::copy(value.begin(), value.end(), memory.begin());
    const std::string request = 'P' + key;
    auto reply = co_await cv::async_bulk_call(s.endpoint(), windows, mr, {0, value.size()}, cv::access::remote_read,
                                              asio::buffer(request), asio::use_awaitable);
    if (reply.size() != 0) throw failure("put " + key + ": " + std::string(reply.str()));
  }
  // The key of this client's window over the value; an empty one (length 0) when the key is not stored.
  asio::awaitable<cv::remote_key> get(const std::string& key) {
    const std::string request = 'G' + key;
    auto reply = co_await s.endpoint().async_call(asio::buffer(request), asio::use_awaitable);
    if (reply.size() == 0) co_return cv::remote_key{};
    co_return cv::parse_bulk_request(reply.bytes()).descriptor.key;
  }
  asio::awaitable<std::pair<cv::error_code, std::vector<std::byte>>> read(cv::remote_key key) {
    const auto into = cv::span_of(mr, memory.size() / 2, std::min<std::size_t>(key.length, memory.size() / 2));
    auto [ec, n] = co_await s.qp().async_read(into, key, tuple);
    co_return std::pair(ec, std::vector<std::byte>(into.bytes.begin(), into.bytes.begin() + std::ptrdiff_t(n)));
  }
};

asio::awaitable<std::unique_ptr<link>> connect(const std::string& host, std::uint16_t port, std::size_t size) {
  auto ex = co_await asio::this_coro::executor;
  co_return std::make_unique<link>(
      co_await cv::async_connect_session(ex, host, port, session_options(), asio::use_awaitable), size);
}

asio::awaitable<void> run_client(std::string host, std::uint16_t port, unsigned id, std::size_t size) {
  const std::string key = "key-" + std::to_string(id);
  const auto first = value_of(id, 1, size), second = value_of(id, 2, size);
  auto l = co_await connect(host, port, size);
  if ((co_await l->get(key)).length != 0) throw failure(key + ": a value before any put");
  co_await l->put(key, first);
  const cv::remote_key old = co_await l->get(key);
  if (co_await l->read(old) != std::pair(cv::error_code(), first)) throw failure(key + ": not the value put");
  co_await l->put(key, second);  // evicts `first`: the server invalidated our window over it before answering
  const cv::error_code stale = (co_await l->read(old)).first;
  if (stale != cv::wc_errc::rem_access_err) throw failure(key + ": a read with the evicted key: " + stale.message());
  l = co_await connect(host, port, size);  // the failed read left the old one's queue pair in the error state
  if (co_await l->read(co_await l->get(key)) != std::pair(cv::error_code(), second)) throw failure(key + ": not new");
}

}  // namespace kv
