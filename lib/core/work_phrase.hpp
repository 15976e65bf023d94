#pragma once
// Private to lib/: the words of a work_holder (outstanding_work.hpp), built from counts.

#include <cstddef>
#include <string>

namespace coverbs::detail {

/// "2 send operations posted, 16 receives posted": the non-zero counts added, in order, and their sum.
class work_phrase {
public:
  void add(std::size_t n, const char* one, const char* many) {
    if (n == 0) return;
    if (!text_.empty()) text_ += ", ";
    text_ += std::to_string(n) + ' ' + (n == 1 ? one : many);
    count_ += n;
  }
  bool empty() const noexcept { return text_.empty(); }
  std::size_t count() const noexcept { return count_; }
  const std::string& text() const noexcept { return text_; }

private:
  std::string text_;
  std::size_t count_ = 0;
};

}  // namespace coverbs::detail
