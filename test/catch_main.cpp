#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

/// Names the running test case in $COVERBS_RUN_DIR/current-test (set by tools/rxe-vm), so that a run
/// stopped at its time limit can say which test case hung.
struct current_test_listener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(const Catch::TestCaseInfo& info) override {
    const char* dir = std::getenv("COVERBS_RUN_DIR");
    if (!dir || !*dir) return;
    const std::string path = std::string(dir) + "/current-test";
    if (std::FILE* f = std::fopen(path.c_str(), "w")) {
      std::fputs(info.name.c_str(), f);
      std::fclose(f);
    }
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(current_test_listener)
