// A test binary whose one test case never finishes on its own: tools/rxe-vm's time limit must stop it
// and name the test case (test/harness/guest-timeout-check).
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

TEST_CASE("this test case hangs until the guest's time limit stops it", "[hang]") {
  std::this_thread::sleep_for(std::chrono::minutes(30));
  FAIL("not stopped");
}
