// lib/core/thread_counters.hpp (private to lib/, header only): a gauge kept as two counters that only go up,
// read while other threads count. The window counters use it for `window_counters::windows_allocated`
// (lib/windows/window_counters.cpp). Deterministic: the read pauses between blocks (the test seam
// `pause_after_block`) while the test makes other threads count.
#include "core/thread_counters.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <semaphore>
#include <thread>

namespace {

struct gauge_tag {};
using blocks = coverbs::detail::thread_counters<gauge_tag, 2>;
constexpr std::size_t made = 0, gone = 1;

/// A thread that counts when the test tells it to, and waits in between.
class counting_thread {
public:
  /// Starts the thread and has it count once (0), so that its block exists from now on: the read sums the
  /// blocks in the order their threads first counted.
  counting_thread() : worker_([this] { serve(); }) {
    run([] { blocks::add(made, 0); });
  }
  ~counting_thread() {
    stopping_ = true;
    go_.release();
    worker_.join();
  }
  counting_thread(const counting_thread&) = delete;
  counting_thread& operator=(const counting_thread&) = delete;

  /// Runs `f` on the thread and returns when it has.
  void run(std::function<void()> f) {
    task_ = std::move(f);
    go_.release();
    done_.acquire();
  }

private:
  void serve() {
    for (;;) {
      go_.acquire();
      if (stopping_) return;
      task_();
      done_.release();
    }
  }
  std::function<void()> task_;
  bool stopping_ = false;
  std::binary_semaphore go_{0}, done_{0};
  std::thread worker_;  // last: it starts with the members above made
};

counting_thread* maker = nullptr;    // its block is read first
counting_thread* remover = nullptr;  // its block is read second
int pauses = 0;

/// The seam: after the read has summed the maker's block (the first), a thing is made on the maker's thread
/// and then goes on the remover's: the read has missed the making and reaches the going.
void make_and_remove_after_first_block() {
  if (pauses++ != 0) return;
  maker->run([] { blocks::add(made); });
  remover->run([] { blocks::add_released(gone); });
}

struct seam_installed {
  seam_installed() {
    pauses = 0;
    blocks::pause_after_block = make_and_remove_after_first_block;
  }
  ~seam_installed() { blocks::pause_after_block = nullptr; }
};

}  // namespace

TEST_CASE("a thing made on one thread and gone on another during a read never reads as 2^64 - 1",
          "[thread_counters][threads]") {
  counting_thread a, b;
  maker = &a;
  remover = &b;
  const std::uint64_t before = blocks::difference(made, gone);  // 0 when this case runs first, as by default
  std::uint64_t during = 0;
  {
    seam_installed seam;
    during = blocks::difference(made, gone);
  }
  CHECK(pauses == 2);       // the seam ran once per block, and the read began before the counts
  CHECK(during == before);  // one wrapping counter (+1, -1) read before - 1 here: from 0, 2^64 - 1
  CHECK(blocks::difference(made, gone) == before);
}

TEST_CASE("things alive before a read are all in it while another is made and gone on two threads",
          "[thread_counters][threads]") {
  counting_thread a, b;
  maker = &a;
  remover = &b;
  const std::uint64_t before = blocks::difference(made, gone);
  a.run([] { blocks::add(made, 3); });  // three more alive, made on the maker's thread
  REQUIRE(blocks::difference(made, gone) == before + 3);
  std::uint64_t during = 0;
  {
    seam_installed seam;
    during = blocks::difference(made, gone);
  }
  CHECK(pauses == 2);
  CHECK(during == before + 3);  // reading the blocks' `made` first, or one wrapping counter, read one less
  b.run([] { blocks::add_released(gone); });
  CHECK(blocks::difference(made, gone) == before + 2);
}

TEST_CASE("what ended threads counted stays in the gauge", "[thread_counters][threads]") {
  const std::uint64_t before = blocks::difference(made, gone);
  std::thread([] { blocks::add(made, 5); }).join();
  std::thread([] {
    blocks::add_released(gone);
    blocks::add_released(gone);
  }).join();
  CHECK(blocks::difference(made, gone) == before + 3);
}
