#pragma once
// What the datagram_rpc server remembers of one sender: its recent replies, to answer a retransmission without
// doing the work twice, and which of its requests were answered, to count each request once however often it is
// sent again and however late its first copy arrives (`--expect N` counts those).
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <vector>

namespace datagram_rpc {

/// The sequence numbers answered so far: every number below `contiguous()` and a sparse set above it (numbers
/// answered while an older one was still being retransmitted). Bounded: with more than `max_sparse` sparse
/// numbers (a peer skipping numbers on purpose), the oldest gap is given up — its numbers count as answered.
class answered_set {
public:
  explicit answered_set(std::size_t max_sparse = 4096) : max_sparse_(max_sparse) {}

  /// Records `seq`; true when it was not answered before (its first answer). The largest number is never a first
  /// answer (the mark below which all were answered cannot pass it).
  bool insert(std::uint64_t seq) {
    if (seq == std::numeric_limits<std::uint64_t>::max()) return false;
    if (seq < contiguous_ || !sparse_.insert(seq).second) return false;
    if (sparse_.size() > max_sparse_) contiguous_ = *sparse_.begin();  // give up the oldest gap
    while (!sparse_.empty() && *sparse_.begin() <= contiguous_) {
      if (*sparse_.begin() == contiguous_) ++contiguous_;
      sparse_.erase(sparse_.begin());
    }
    return true;
  }

  /// Every sequence number below this one was answered (or given up).
  std::uint64_t contiguous() const noexcept { return contiguous_; }
  /// How many answered numbers lie above `contiguous()`.
  std::size_t sparse() const noexcept { return sparse_.size(); }

private:
  std::size_t max_sparse_;
  std::uint64_t contiguous_ = 0;
  std::set<std::uint64_t> sparse_;
};

/// One sender's replies by sequence number, the newest few kept (a window's worth and more), and the requests it
/// had answered.
class sender_cache {
public:
  /// The reply already sent to request `seq`, if it is still kept; else null.
  const std::vector<std::byte>* find(std::uint64_t seq) const {
    const auto it = replies_.find(seq);
    return it == replies_.end() ? nullptr : &it->second;
  }

  /// Records `reply`, computed now for request `seq` (which `find` did not have), keeping the `kept` newest
  /// replies (at least 1); true when `seq` was never answered before — false for a request answered earlier whose reply
  /// was forgotten meanwhile. A first copy that arrives after newer requests pushed the oldest replies out (it was lost
  /// and sent again meanwhile) is still a first answer.
  bool record(std::uint64_t seq, std::span<const std::byte> reply, std::size_t kept) {
    if (seq >= forgotten_below_) {
      replies_.emplace(seq, std::vector<std::byte>(reply.begin(), reply.end()));
      if (replies_.size() > kept) {  // forget the oldest
        forgotten_below_ = replies_.begin()->first + 1;
        replies_.erase(replies_.begin());
      }
    }
    return answered_.insert(seq);
  }

private:
  std::map<std::uint64_t, std::vector<std::byte>> replies_;
  std::uint64_t forgotten_below_ = 0;  // replies below were forgotten
  answered_set answered_;
};

}  // namespace datagram_rpc
