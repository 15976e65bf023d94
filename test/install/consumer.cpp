// A program built out of tree against coverbs: one source for the three consumers of check-install
// (pkg-config, CMake find_package, Meson subproject). It opens the first device (rxe0 in the guest),
// allocates a protection domain and registers a memory region, then runs an Asio timer on the loop its
// flags select. With --device a missing device fails it; without, errc::no_device is accepted (a host
// without RDMA).
#include <coverbs/coverbs.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string_view>
#include <vector>

int main(int argc, char** argv) {
  const std::string_view self = argv[0];
  const std::string_view name = self.substr(self.find_last_of('/') + 1);
  const bool need_device = argc > 1 && std::string_view(argv[1]) == "--device";
  try {
    coverbs::device dev = coverbs::device::open();
    coverbs::protection_domain pd(dev);
    std::vector<std::byte> buf(4096);
    coverbs::memory_region mr(pd, buf, coverbs::access::local_write | coverbs::access::remote_read);
    std::printf("%.*s: %s: protection domain, %zu-byte memory region (lkey 0x%x)\n", int(name.size()),
                name.data(), dev.name().c_str(), buf.size(), mr.lkey());
  } catch (const coverbs::system_error& e) {
    if (need_device || e.code() != coverbs::errc::no_device) {
      std::printf("%.*s: %s\n", int(name.size()), name.data(), e.what());
      return 1;
    }
    std::printf("%.*s: no device (errc::no_device, expected on a host without RDMA)\n", int(name.size()),
                name.data());
  }

  boost::asio::io_context io;  // the consumer's Asio: the same backend as the library (coverbs/config.hpp)
  boost::asio::steady_timer timer(io, std::chrono::milliseconds(1));
  bool fired = false;
  timer.async_wait([&](coverbs::error_code ec) { fired = !ec; });
  io.run();
  std::printf("%.*s: Asio (%s) timer %s\n", int(name.size()), name.data(), COVERBS_ASIO_BACKEND,
              fired ? "fired: ok" : "did not fire");
  return fired ? 0 : 1;
}
