// A consumer translation unit for check-asio-config: it includes coverbs and Asio and calls into
// libcoverbs, so it compiles only with the library's Asio flags and links only against a library built
// for the backend those flags select.
#include <coverbs/error.hpp>

#include <boost/asio/io_context.hpp>

#include <cstdio>

int main() {
  boost::asio::io_context io;
  io.run();
  std::printf("%s\n", make_error_code(coverbs::errc::no_device).message().c_str());
}
