#pragma once
// A bounded map for the datagram_rpc server's per-sender state: a peer chooses its client id and may send from
// many addresses, so what the server remembers per sender must have a cap.
#include <cstddef>
#include <list>
#include <map>
#include <utility>

namespace datagram_rpc {

/// A map that keeps its `capacity` most recently touched entries.
template <class Key, class Value>
class lru {
public:
  explicit lru(std::size_t capacity) : capacity_(capacity) {}
  /// The entry of `key` (made empty if absent), now the most recently used; the least recently used one goes
  /// when there are more than `capacity`.
  Value& touch(const Key& key) {
    if (auto it = index_.find(key); it != index_.end()) {
      order_.splice(order_.begin(), order_, it->second);
      return it->second->second;
    }
    order_.emplace_front(key, Value{});
    index_.emplace(key, order_.begin());
    if (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    return order_.front().second;
  }
  std::size_t size() const noexcept { return order_.size(); }

private:
  std::size_t capacity_;
  std::list<std::pair<Key, Value>> order_;
  std::map<Key, typename std::list<std::pair<Key, Value>>::iterator> index_;
};

}  // namespace datagram_rpc
