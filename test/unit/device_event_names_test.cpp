// Device events without a device: names and kinds of events, the causes queue pairs report, and
// construction errors.
#include <coverbs/device.hpp>
#include <coverbs/device_events.hpp>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>

#include <string>

namespace cv = coverbs;

TEST_CASE("every event kind has the verbs name", "[events]") {
  for (int t = IBV_EVENT_CQ_ERR; t <= IBV_EVENT_WQ_FATAL; ++t) {
    const auto type = static_cast<ibv_event_type>(t);
    INFO("event type " << t);
    CHECK(std::string(cv::device_event::name_of(type)) == ibv_event_type_str(type));
    CHECK(std::string(cv::device_event::name_of(type)) != "unknown");
  }
  cv::device_event e;
  e.type = IBV_EVENT_PORT_ERR;
  CHECK(std::string(e.name()) == "port error");
  // A value verbs does not name. It must lie within the enum's range (0..31: IBV_EVENT_WQ_FATAL is 19):
  // forming 999 is undefined behaviour, which UndefinedBehaviorSanitizer (clang's -fsanitize=enum) reports.
  CHECK(std::string(cv::device_event::name_of(static_cast<ibv_event_type>(31))) == "unknown");
}

TEST_CASE("an event says which kind of object it is about", "[events]") {
  auto kind = [](ibv_event_type t) {
    cv::device_event e;
    e.type = t;
    return std::string(e.port_event() ? "port" : "") + (e.qp_event() ? "qp" : "") + (e.cq_event() ? "cq" : "") +
           (e.srq_event() ? "srq" : "");
  };
  CHECK(kind(IBV_EVENT_PORT_ACTIVE) == "port");
  CHECK(kind(IBV_EVENT_PORT_ERR) == "port");
  CHECK(kind(IBV_EVENT_GID_CHANGE) == "port");
  CHECK(kind(IBV_EVENT_QP_FATAL) == "qp");
  CHECK(kind(IBV_EVENT_QP_REQ_ERR) == "qp");
  CHECK(kind(IBV_EVENT_QP_ACCESS_ERR) == "qp");
  CHECK(kind(IBV_EVENT_QP_LAST_WQE_REACHED) == "qp");
  CHECK(kind(IBV_EVENT_CQ_ERR) == "cq");
  CHECK(kind(IBV_EVENT_SRQ_ERR) == "srq");
  CHECK(kind(IBV_EVENT_SRQ_LIMIT_REACHED) == "srq");
  CHECK(kind(IBV_EVENT_DEVICE_FATAL).empty());
}

TEST_CASE("the causes a device event leaves in a queue pair name the event", "[events][error]") {
  const std::pair<cv::errc, const char*> causes[] = {
      {cv::errc::port_error, "IBV_EVENT_PORT_ERR"},         {cv::errc::device_fatal, "IBV_EVENT_DEVICE_FATAL"},
      {cv::errc::qp_fatal, "IBV_EVENT_QP_FATAL"},           {cv::errc::qp_request_error, "IBV_EVENT_QP_REQ_ERR"},
      {cv::errc::qp_access_error, "IBV_EVENT_QP_ACCESS_ERR"}, {cv::errc::cq_error, "IBV_EVENT_CQ_ERR"},
  };
  for (const auto& [e, verb] : causes) {
    const cv::error_code ec = e;
    INFO(ec.message());
    CHECK(ec.category() == cv::coverbs_category());
    CHECK(ec.message().find(verb) != std::string::npos);
    CHECK(ec != cv::wc_errc::wr_flush_err);
  }
  CHECK(cv::error_code(cv::errc::device_events_busy).message().find("one reader") != std::string::npos);
}

TEST_CASE("device_events on a device that is not open is refused with EBADF", "[events]") {
  boost::asio::io_context io;
  cv::device closed;
  try {
    cv::device_events ev(io, closed);
    FAIL("device_events accepted a closed device");
  } catch (const cv::system_error& e) {
    CHECK(e.code() == boost::system::errc::bad_file_descriptor);
    CHECK(std::string(e.what()).find("not open") != std::string::npos);
  }
}
