// libcoverbs loaded at run time, after the program started (a plugin, a module of an interpreter): dlopen gets it.
// glibc keeps only a small surplus of static thread-local storage for libraries loaded then, and libcoverbs' hot
// per-thread caches use the initial-exec model, which puts the library's whole TLS segment (every thread_local in
// it) in static TLS: so every one must stay a few words, never a buffer. A 4 KiB page aligned to 4 KiB there once
// made this dlopen fail ("cannot allocate memory in static TLS block"). The library stays loaded (no dlclose).
// This program does not link libcoverbs; meson passes the built library's path in COVERBS_LIBRARY.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <cstdlib>
#include <string>

TEST_CASE("libcoverbs loads with dlopen after the program started", "[dlopen]") {
  const char* path = std::getenv("COVERBS_LIBRARY");
  REQUIRE(path != nullptr);
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  const std::string why = handle ? "" : dlerror();
  INFO("dlopen(\"" << path << "\"): " << why);
  CHECK(handle != nullptr);
}
