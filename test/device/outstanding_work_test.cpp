// "What keeps run() busy?" (outstanding_work.hpp) on a real device (rxe0 with 10.77.0.1 in the Soft-RoCE
// guest): one object of each kind that can hold work is left holding it — a completion queue, a shared receive
// queue, a datagram queue pair, the device-events reader, a listener, a connection, a datagram listener and a
// datagram resolution — and the listing names every one; once their work ends, it names none.
#include <coverbs/cm.hpp>

#include "fixtures/event_loop.hpp"
#include "fixtures/test_buffer.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <optional>
#include <string>

namespace asio = boost::asio;
namespace cv = coverbs;
using test::test_buffer;

namespace {

constexpr const char* address = "10.77.0.1";  // veth0, under rxe0
constexpr const char* nobody = "10.77.0.9";   // on veth0's subnet, answers no ARP

const cv::work_holder* find(const std::vector<cv::work_holder>& v, const std::string& kind) {
  const auto it = std::find_if(v.begin(), v.end(), [&](const cv::work_holder& h) { return h.kind == kind; });
  return it == v.end() ? nullptr : &*it;
}

}  // namespace

TEST_CASE("the busy listing names every kind of coverbs object that holds work, and none once it ended",
          "[outstanding_work]") {
  test::event_loop loop;
  const auto ex = loop.io.get_executor();
  cv::device dev = cv::device::open();
  cv::protection_domain pd(dev);
  cv::completion_queue cq(loop.io, dev);
  test_buffer buf(pd, 4096);
  int completed = 0;
  asio::cancellation_signal cancel_accept, cancel_connect, cancel_resolve;
  {
    cv::shared_receive_queue srq(pd, cq, {.max_wr = 4, .max_sge = 1, .limit = 0});
    for (int i = 0; i < 2; ++i)
      srq.async_recv(buf.span(0, 64), [&](cv::error_code, cv::srq_received) { ++completed; });
    cv::datagram_queue_pair udp(pd, cq);
    udp.async_recv(buf.span(1024, 1024), [&](cv::error_code, cv::received_datagram) { ++completed; });
    std::optional<cv::device_events> events(std::in_place, loop.io, dev);
    std::optional<cv::listener> l(std::in_place, ex, address, 0);
    l->async_accept(asio::bind_cancellation_slot(cancel_accept.slot(), [&](cv::error_code, cv::connection) {
      ++completed;
    }));
    // Resolving an address nobody has fails after resolve_address_timeout: long enough here that both waits
    // are still there when the listing is read, however slow the guest.
    cv::connect_options slow_connect;
    slow_connect.resolve_address_timeout = std::chrono::seconds(60);
    cv::datagram_resolve_options slow_resolve;
    slow_resolve.resolve_address_timeout = std::chrono::seconds(60);
    cv::async_connect(ex, nobody, 7471, slow_connect,
                      asio::bind_cancellation_slot(cancel_connect.slot(), [&](cv::error_code, cv::connection) {
                        ++completed;
                      }));
    std::optional<cv::datagram_listener> dl(std::in_place, loop.io, udp, address, 0);
    cv::async_resolve_datagram_peer(pd, udp, nobody, 7472, slow_resolve,
                                    asio::bind_cancellation_slot(cancel_resolve.slot(),
                                                                 [&](cv::error_code, cv::datagram_peer) { ++completed; }));
    // Every wait started: the connect and the resolve register once their first rdma_cm step is under way,
    // which a loaded guest (ASan, another guest beside it) may take well over the 300 ms this once waited.
    const char* kinds[] = {"completion_queue", "shared_receive_queue", "datagram_queue_pair", "device_events",
                           "listener", "connection", "datagram_listener", "datagram_resolve"};
    CHECK(loop.run_until(
        [&] {
          const auto now = cv::outstanding_work(loop.io);
          return std::all_of(std::begin(kinds), std::end(kinds), [&](const char* k) { return find(now, k); });
        },
        std::chrono::seconds(10)));

    const auto work = cv::outstanding_work(loop.io);
    INFO(cv::describe(work));
    const cv::work_holder* h = find(work, "completion_queue");
    REQUIRE(h);
    CHECK(h->what.find("3 work requests outstanding") != std::string::npos);  // 2 SRQ receives + 1 datagram receive
    REQUIRE((h = find(work, "shared_receive_queue")));
    CHECK(h->what == "2 receives posted");
    CHECK(h->name.find("on rxe0") != std::string::npos);
    REQUIRE((h = find(work, "datagram_queue_pair")));
    CHECK(h->what == "1 receive posted");
    CHECK(h->operations == 1);
    REQUIRE((h = find(work, "device_events")));
    CHECK(h->name == "device_events of rxe0");
    REQUIRE((h = find(work, "listener")));
    CHECK(h->what.find("1 async_accept pending") == 0);
    CHECK(h->name.find(std::string("listener on ") + address + ":" + std::to_string(l->local_port())) == 0);
    REQUIRE((h = find(work, "connection")));
    CHECK(h->what.find("1 connect or accept in progress") == 0);
    CHECK(h->name.find(nobody) != std::string::npos);
    REQUIRE((h = find(work, "datagram_listener")));
    CHECK(h->name.find(address) != std::string::npos);
    REQUIRE((h = find(work, "datagram_resolve")));
    CHECK(h->name.find(nobody) != std::string::npos);
    CHECK(work.size() == 8);  // nothing else, nothing twice

    // End the waits: cancel the pending operations, close the readers; the queues flush when destroyed.
    cancel_accept.emit(asio::cancellation_type::terminal);
    cancel_connect.emit(asio::cancellation_type::terminal);
    cancel_resolve.emit(asio::cancellation_type::terminal);
    REQUIRE(loop.run_until([&] { return completed == 3; }, std::chrono::seconds(10)));
    events.reset();
    l.reset();
    dl.reset();
  }
  REQUIRE(loop.run_until([&] { return completed == 6; }, std::chrono::seconds(10)));
  loop.io.run_for(std::chrono::milliseconds(100));
  INFO(cv::describe_outstanding_work(loop.io));
  CHECK(cv::outstanding_work(loop.io).empty());
}
