// The Asio loop coverbs builds on runs on the backend meson chose (io_uring unless switched off).
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <catch2/catch.hpp>

#include <unistd.h>

#include <array>
#include <chrono>

TEST_CASE("the loop runs timers and descriptor reads on its backend", "[asio]") {
#if defined(BOOST_ASIO_HAS_IO_URING) && defined(BOOST_ASIO_DISABLE_EPOLL)
  INFO("backend: io_uring");
#else
  INFO("backend: epoll");
#endif
  boost::asio::io_context io;
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  boost::asio::posix::stream_descriptor in(io, fds[0]), out(io, fds[1]);
  std::array<char, 5> got{};
  bool read_done = false, timer_done = false;
  boost::asio::async_read(in, boost::asio::buffer(got),
                          [&](boost::system::error_code ec, std::size_t n) { read_done = !ec && n == 5; });
  boost::asio::steady_timer timer(io, std::chrono::milliseconds(5));
  timer.async_wait([&](boost::system::error_code ec) {
    timer_done = !ec;
    boost::asio::write(out, boost::asio::buffer("hello", 5));
  });
  io.run();
  CHECK(timer_done);
  CHECK(read_done);
  CHECK(std::string(got.data(), 5) == "hello");
}
