// Window bind validation without a device: each rule has its own errc, checked in the documented order.
#include <coverbs/detail/bind_check.hpp>
#include <coverbs/memory_window.hpp>
#include <coverbs/window_counters.hpp>

#include <catch2/catch.hpp>

namespace cv = coverbs;
using cv::errc;

namespace {

int pd_a, pd_b;  // stand-ins for two protection domains

cv::detail::bind_check good() {
  cv::detail::bind_check c;
  c.type = cv::window_type::type2;
  c.window_pd = c.qp_pd = c.region_pd = &pd_a;
  c.region_rights = cv::access::local_write | cv::access::remote_read | cv::access::remote_write | cv::access::mw_bind;
  c.region_length = 8192;
  c.range = {4096, 4096};
  c.rights = cv::access::remote_read;
  return c;
}

cv::error_code check(const cv::detail::bind_check& c) {
  std::size_t length = 0;
  return cv::detail::validate_bind(c, length);
}

}  // namespace

TEST_CASE("a valid bind resolves its length, and `all` means to the end of the region", "[mw][unit]") {
  auto c = good();
  std::size_t length = 0;
  CHECK_FALSE(cv::detail::validate_bind(c, length));
  CHECK(length == 4096);
  c.range = {1000, cv::window_range::all};
  CHECK_FALSE(cv::detail::validate_bind(c, length));
  CHECK(length == 8192 - 1000);
}

TEST_CASE("each broken bind rule has its own errc", "[mw][unit]") {
  auto c = good();
  c.region_pd = &pd_b;
  CHECK(check(c) == errc::pd_mismatch);
  c = good();
  c.qp_pd = &pd_b;
  CHECK(check(c) == errc::pd_mismatch);
  c = good();
  c.rights = cv::access::remote_read | cv::access::zero_based;
  CHECK(check(c) == errc::window_access_invalid);
  c = good();
  c.region_rights = cv::access::local_write | cv::access::remote_read;
  CHECK(check(c) == errc::region_lacks_mw_bind);
  c = good();
  c.region_rights = cv::access::remote_read | cv::access::mw_bind;
  c.rights = cv::access::remote_atomic;
  CHECK(check(c) == errc::window_needs_local_write);
  c = good();
  c.rights = cv::access::remote_atomic;  // the region grants no atomics: the intersection would be empty
  CHECK(check(c) == errc::access_exceeds_region);
  c = good();
  c.range = {4097, 4096};
  CHECK(check(c) == errc::range_outside_region);
  c.range = {8193, cv::window_range::all};
  CHECK(check(c) == errc::range_outside_region);
  c = good();
  c.range = {8192, cv::window_range::all};
  CHECK(check(c) == errc::zero_length_window);
  c = good();
  c.state = cv::window_state::bound;
  CHECK(check(c) == errc::window_still_bound);
  c.rebind = true;
  CHECK_FALSE(check(c));
  c.rebind = false;
  c.type = cv::window_type::type1;  // type 1 rebinds in place
  CHECK_FALSE(check(c));
}

TEST_CASE("an empty window reports no key and the counters start readable", "[mw][unit]") {
  cv::memory_window w;
  CHECK_FALSE(w);
  CHECK(w.state() == cv::window_state::unbound);
  CHECK(w.key() == cv::remote_key{});
  CHECK_FALSE(w.note_remote_invalidation(42));
  const auto s = cv::window_statistics();
  CHECK(s.windows_bound <= s.windows_allocated);
}
