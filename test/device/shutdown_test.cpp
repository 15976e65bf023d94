// Shutdown order on a real device (rxe0 in the Soft-RoCE guest). As with Asio's own I/O objects, a program
// destroys coverbs' objects before their io_context; what coverbs keeps alive by itself through a pending
// operation must then survive the io_context's destruction, whatever is still queued in it. Asio destroys
// some pending operations only while it destroys its services (the io_uring service's, after the timer
// service is gone); an object whose last reference drops there must not touch a service any more.
// AddressSanitizer (the sanitizer leg of tools/check) reports a use-after-free where this is broken.
#include "fixtures/completion.hpp"
#include "fixtures/test_buffer.hpp"

#include <boost/asio/io_context.hpp>

#include <catch2/catch.hpp>

#include <memory>

namespace asio = boost::asio;
namespace cv = coverbs;
using test::completion;
using test::test_buffer;

TEST_CASE("an io_context destroyed without running again after its queue pairs and queue is clean",
          "[shutdown][cq]") {
  cv::device dev = cv::device::open();
  cv::protection_domain pd(dev);
  auto io = std::make_unique<asio::io_context>();
  auto cq = std::make_unique<cv::completion_queue>(*io, dev);
  auto a = std::make_unique<cv::queue_pair>(pd, *cq);
  auto b = std::make_unique<cv::queue_pair>(pd, *cq);
  cv::connect_pair(*a, *b);
  test_buffer buf(pd, 4096);
  completion<cv::received> r;
  b->async_recv(buf.span(0, 64), r.handler());  // never satisfied: the queue waits on its channel
  io->run_for(std::chrono::milliseconds(50));
  CHECK_FALSE(r.done());
  CHECK(cq->outstanding() == 1);
  // The queue pairs first (their receive is flushed, its handler posted to the loop), then the queue,
  // then the io_context with that handler and the queue's cancelled wait still queued in it.
  b.reset();
  a.reset();
  cq.reset();
  io.reset();
  CHECK_FALSE(r.done());  // a handler never runs after its io_context is gone
}

TEST_CASE("an io_context destroyed with a dispatch turn queued is clean", "[shutdown][cq]") {
  cv::device dev = cv::device::open();
  cv::protection_domain pd(dev);
  test_buffer src(pd, 4096), dst(pd, 4096);
  auto io = std::make_unique<asio::io_context>();
  int done = 0;
  {
    cv::completion_queue cq(*io, dev);
    cv::queue_pair a(pd, cq), b(pd, cq);
    cv::connect_pair(a, b);
    for (int i = 0; i < 8; ++i)
      a.async_write(src.span(0, 8), dst.key().slice(0, 8), [&](cv::error_code, std::size_t) { ++done; });
    // The queue's first turn is posted (it arms and polls on the next turn of the loop) and never runs;
    // the queue pairs and the queue go first, their handlers stay queued in the loop.
  }
  io.reset();
  CHECK(done == 0);
}
