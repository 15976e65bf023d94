#include <coverbs/error.hpp>

#include <boost/asio/error.hpp>
#include <catch2/catch.hpp>

#include <cerrno>

using coverbs::errc;
using coverbs::error_code;
using coverbs::wc_errc;

TEST_CASE("every ibv_wc_status maps to its own wc_errc with a message", "[error]") {
  for (int s = IBV_WC_SUCCESS; s <= IBV_WC_TM_RNDV_INCOMPLETE; ++s) {
    const error_code ec = coverbs::make_error_code(static_cast<ibv_wc_status>(s));
    if (s == IBV_WC_SUCCESS) {
      CHECK_FALSE(ec);
      continue;
    }
    INFO("status " << s << ": " << ibv_wc_status_str(static_cast<ibv_wc_status>(s)));
    CHECK(ec.category() == coverbs::wc_category());
    CHECK(ec.value() == s);
    CHECK(ec.message().find("unknown") == std::string::npos);
  }
  CHECK(coverbs::make_error_code(IBV_WC_REM_ACCESS_ERR) == wc_errc::rem_access_err);
  CHECK(error_code(wc_errc::wr_flush_err) != wc_errc::rem_access_err);
  CHECK(error_code(wc_errc::rem_access_err).message().find("rkey") != std::string::npos);
}

TEST_CASE("library conditions compare as errc and explain themselves", "[error]") {
  const error_code ec = errc::no_device;
  CHECK(ec == errc::no_device);
  CHECK(ec.category() == coverbs::coverbs_category());
  CHECK(ec.message().find("tools/rxe-vm") != std::string::npos);
  CHECK(ec.message().find("no RDMA support") != std::string::npos);
  CHECK(error_code(errc::window_needs_local_write).message().find("C10-74") != std::string::npos);
  CHECK(error_code(errc::region_lacks_mw_bind).message().find("C10-73") != std::string::npos);
  CHECK(error_code(errc::range_outside_region) != errc::access_exceeds_region);
}

TEST_CASE("limits are named: the device's limits compare as EINVAL, mw_bind on read-only memory as EFAULT",
          "[error]") {
  const error_code limit = errc::device_limit_exceeded;
  CHECK(limit == boost::system::errc::invalid_argument);
  CHECK(limit.message().find("limit") != std::string::npos);
  const error_code bind = errc::mw_bind_needs_writable_memory;
  CHECK(bind == boost::system::errc::bad_address);
  CHECK(bind.message().find("mw_bind") != std::string::npos);
  CHECK(error_code(errc::buffer_not_mapped).message().find("mw_bind") != std::string::npos);
  CHECK(error_code(errc::message_too_long).message().find("max_msg_sz") != std::string::npos);
}

TEST_CASE("datagram refusals say what was wrong and compare as the errno they refine", "[error]") {
  const error_code too_long = errc::datagram_too_long;
  CHECK(too_long == boost::system::errc::message_size);
  CHECK(too_long.message().find("max_datagram_size()") != std::string::npos);
  CHECK(too_long.message().find("C10-93.1.1") != std::string::npos);
  const error_code qkey = errc::invalid_qkey;
  CHECK(qkey == boost::system::errc::invalid_argument);
  CHECK(qkey.message().find("bit 31") != std::string::npos);
  const error_code ah = errc::address_handle_mismatch;
  CHECK(ah == boost::system::errc::invalid_argument);
  CHECK(ah.message().find("protection domain") != std::string::npos);
  CHECK(too_long != errc::message_too_long);
  CHECK(qkey != ah);
}

TEST_CASE("a NULL-returning verb reports the errno it left", "[error]") {
  errno = ENOMEM;
  error_code ec = coverbs::verbs_null_result(nullptr);
  CHECK(ec == boost::system::errc::not_enough_memory);
  CHECK(ec.category() == boost::system::system_category());
  int x = 0;
  errno = ENOMEM;
  CHECK_FALSE(coverbs::verbs_null_result(&x));
  errno = 0;
  CHECK(coverbs::verbs_null_result(nullptr) == errc::unspecified_verbs_failure);
}

TEST_CASE("an errno-returning verb reports that errno, positive or negative", "[error]") {
  CHECK_FALSE(coverbs::verbs_status_result(0));
  CHECK(coverbs::verbs_status_result(EINVAL) == boost::system::errc::invalid_argument);
  CHECK(coverbs::verbs_status_result(-EINVAL) == boost::system::errc::invalid_argument);
  CHECK(coverbs::verbs_status_result(ENOMEM) == boost::system::errc::not_enough_memory);
}

TEST_CASE("a -1-returning verb reports errno", "[error]") {
  errno = EAGAIN;
  CHECK(coverbs::verbs_errno_result(-1) == boost::system::errc::resource_unavailable_try_again);
  errno = EAGAIN;
  CHECK_FALSE(coverbs::verbs_errno_result(0));
  CHECK_FALSE(coverbs::verbs_errno_result(5));
}

TEST_CASE("ibv_rereg_mr results say whether the old region survived", "[error]") {
  bool valid = false;
  CHECK_FALSE(coverbs::verbs_rereg_result(0, valid));
  CHECK(valid);
  errno = EOPNOTSUPP;
  CHECK(coverbs::verbs_rereg_result(IBV_REREG_MR_ERR_CMD, valid) == boost::system::errc::operation_not_supported);
  CHECK(valid);
  errno = EIO;
  CHECK(coverbs::verbs_rereg_result(IBV_REREG_MR_ERR_DONT_FORK_NEW, valid));
  CHECK_FALSE(valid);
  errno = 0;
  CHECK(coverbs::verbs_rereg_result(IBV_REREG_MR_ERR_INPUT, valid) == boost::system::errc::invalid_argument);
}

TEST_CASE("errors travel as Asio's error_code and throw as system_error with context", "[error]") {
  const boost::system::error_code asio_ec = wc_errc::retry_exc_err;  // the type Asio handlers receive
  CHECK(asio_ec == wc_errc::retry_exc_err);
  CHECK(asio_ec != boost::asio::error::operation_aborted);
  CHECK_NOTHROW(coverbs::throw_on_error({}, "nothing"));
  try {
    coverbs::throw_on_error(errc::device_not_found, "open device \"mlx9\"");
    FAIL("no exception");
  } catch (const coverbs::system_error& e) {
    CHECK(e.code() == errc::device_not_found);
    CHECK(std::string(e.what()).find("open device \"mlx9\"") != std::string::npos);
  }
}
