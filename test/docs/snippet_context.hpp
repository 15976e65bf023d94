// The names a `<!-- snippet: coroutine -->` block of the docs may use without declaring them: what the
// surrounding text of each guide assumes is already set up. The snippets are compiled, never run.
#pragma once
#include <coverbs/coverbs.hpp>

#include <boost/asio.hpp>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

namespace coverbs_snippets {
namespace asio = boost::asio;
namespace cv = coverbs;
using asio::co_spawn;
using asio::detached;
using boost::system::error_code;

struct world {
  asio::io_context io;
  cv::device dev;
  cv::protection_domain pd;
  cv::completion_queue cq;
  cv::queue_pair qp;
  std::vector<std::byte> buffer;
  cv::memory_region mr;
  cv::registered_span span;
  cv::remote_key key;
  std::size_t offset, length, off, n;
  cv::access rw;
};

// Functions the guides call and leave to the reader.
asio::awaitable<void> serve(cv::connection c);
asio::awaitable<void> send_key_to_peer(cv::remote_key key);

}  // namespace coverbs_snippets

#define COVERBS_SNIPPET_NAMES(w)                                                                      \
  [[maybe_unused]] auto& io = (w).io;                                                                 \
  [[maybe_unused]] auto& dev = (w).dev;                                                               \
  [[maybe_unused]] auto& pd = (w).pd;                                                                 \
  [[maybe_unused]] auto& cq = (w).cq;                                                                 \
  [[maybe_unused]] auto& qp = (w).qp;                                                                 \
  [[maybe_unused]] auto& mr = (w).mr;                                                                 \
  [[maybe_unused]] auto& buffer = (w).buffer;                                                         \
  [[maybe_unused]] auto& span = (w).span;                                                             \
  [[maybe_unused]] auto& key = (w).key;                                                               \
  [[maybe_unused]] auto offset = (w).offset, length = (w).length, off = (w).off, n = (w).n;           \
  [[maybe_unused]] auto rw = (w).rw;
