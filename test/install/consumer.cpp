// An out-of-tree program built against an installed coverbs through pkg-config.
#include <coverbs/coverbs.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdio>

int main() {
  coverbs::error_code ec;
  const auto devices = coverbs::list_devices(ec);
  if (ec && ec != coverbs::errc::no_device) {
    std::printf("unexpected error: %s\n", ec.message().c_str());
    return 1;
  }
  std::printf("consumer: %zu device(s)%s\n", devices.size(), ec ? " (no_device, as expected without RDMA)" : "");

  boost::asio::io_context io;  // the Asio flags from coverbs.pc select the same backend as the library
  boost::asio::steady_timer timer(io, std::chrono::milliseconds(1));
  bool fired = false;
  timer.async_wait([&](coverbs::error_code e) { fired = !e; });
  io.run();
  std::printf("consumer: asio timer %s\n", fired ? "fired" : "did not fire");
  return fired ? 0 : 1;
}
