// "What keeps run() busy?" (outstanding_work.hpp) natively on the software verbs device: the listing names the
// queue pairs and completion queues that hold operations, with their counts, and nothing once they completed;
// a loop pool's listing asks every member on its own thread and names a member stuck in a handler.
#include "fixtures/run_all.hpp"
#include "fixtures/soft_pair.hpp"

#include <boost/asio/post.hpp>

#include <pthread.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <future>
#include <optional>
#include <string>

namespace cv = coverbs;
namespace asio = boost::asio;

namespace {

const cv::work_holder* find(const std::vector<cv::work_holder>& v, const std::string& kind, const std::string& name) {
  const auto it = std::find_if(v.begin(), v.end(), [&](const cv::work_holder& h) {
    return h.kind == kind && h.name.find(name) != std::string::npos;
  });
  return it == v.end() ? nullptr : &*it;
}

std::string qp_name(const cv::queue_pair& qp) {
  char s[32];
  std::snprintf(s, sizeof s, "qp 0x%x", qp.native_handle()->qp_num);
  return s;
}

}  // namespace

TEST_CASE("an io_context without coverbs objects: no outstanding work, and the text says so", "[outstanding_work]") {
  asio::io_context io;
  CHECK(cv::outstanding_work(io).empty());
  CHECK(cv::describe_outstanding_work(io) == "coverbs holds no outstanding work on this context\n");
}

TEST_CASE("posted receives and sends are listed by queue pair, with the completion queue's wait", "[outstanding_work]") {
  asio::io_context io;
  soft_verbs::soft_pair rig(io, 4, 64);
  // Idle objects hold nothing.
  CHECK(cv::outstanding_work(io).empty());

  int received = 0, sent = 0;
  for (int i = 0; i < 3; ++i)
    rig.b.async_recv(rig.remote_span(8), [&](cv::error_code ec, cv::received) { received += !ec; });
  auto work = cv::outstanding_work(io);
  const cv::work_holder* b = find(work, "queue_pair", qp_name(rig.b));
  REQUIRE(b);
  CHECK(b->operations == 3);
  CHECK(b->what == "3 receives posted");
  CHECK(b->name.find("on ") != std::string::npos);
  CHECK_FALSE(find(work, "queue_pair", qp_name(rig.a)));  // a holds nothing
  const cv::work_holder* cq = find(work, "completion_queue", "cq ");
  REQUIRE(cq);
  CHECK(cq->what.find("3 work requests outstanding") != std::string::npos);

  // Outside a dispatch turn a send is posted at once; with a send queue of 4, the sixth and seventh wait.
  for (int i = 0; i < 6; ++i)
    rig.a.async_send(rig.local_span(8), [&](cv::error_code ec, std::size_t) { sent += !ec; });
  work = cv::outstanding_work(io);
  const cv::work_holder* a = find(work, "queue_pair", qp_name(rig.a));
  REQUIRE(a);
  CHECK(a->what == "4 send operations posted, 2 send operations waiting for a send-queue credit");
  CHECK(a->operations == 6);
  const std::string text = cv::describe_outstanding_work(io);
  CHECK(text.find("queue_pair " + qp_name(rig.a)) != std::string::npos);
  CHECK(text.find("6 operations - 4 send operations posted") != std::string::npos);

  // The receives take three of the sends; three more receives take the rest. Then nothing is left.
  for (int i = 0; i < 3; ++i)
    rig.b.async_recv(rig.remote_span(8), [&](cv::error_code ec, cv::received) { received += !ec; });
  io.run();
  CHECK(received == 6);
  CHECK(sent == 6);
  CHECK(cv::outstanding_work(io).empty());
}

TEST_CASE("message endpoints: a call awaiting its reply, a request not answered", "[outstanding_work]") {
  asio::io_context io;
  soft_verbs::soft_pair rig(io, 64, 64);
  cv::message_options o;
  o.slot_size = 64;
  o.recv_slots = o.send_slots = 8;
  cv::message_endpoint client(rig.pd, rig.a, o), server(rig.pd, rig.b, o);
  std::optional<cv::error_code> call_ec;
  client.async_call(asio::buffer("question", 8), [&](cv::error_code ec, cv::inbound_message) { call_ec = ec; });
  std::optional<cv::inbound_request> request;
  server.async_receive_request([&](cv::error_code ec, cv::inbound_request r) {
    REQUIRE_FALSE(ec);
    request = std::move(r);
  });
  for (int i = 0; i < 1000 && !request; ++i)
    io.run_one();
  REQUIRE(request);
  const auto work = cv::outstanding_work(io);
  INFO(cv::describe(work));
  std::vector<std::string> endpoints;
  for (const cv::work_holder& h : work)
    if (h.kind == "message_endpoint") endpoints.push_back(h.name + ": " + h.what);
  REQUIRE(endpoints.size() == 2);
  const std::string a = "endpoint on " + qp_name(rig.a) + ": 1 call awaiting its reply";
  const std::string b = "endpoint on " + qp_name(rig.b) + ": 1 request received and not answered";
  CHECK(std::count(endpoints.begin(), endpoints.end(), a) == 1);
  CHECK(std::count(endpoints.begin(), endpoints.end(), b) == 1);
  server.async_reply(*request, asio::buffer("answer", 6), [](cv::error_code) {});
  for (int i = 0; i < 1000 && !call_ec; ++i)
    io.run_one();
  REQUIRE(call_ec);
  CHECK_FALSE(*call_ec);
  for (const cv::work_holder& h : cv::outstanding_work(io))
    CHECK(h.kind != "message_endpoint");
}

TEST_CASE("a loop pool: each member answers on its own thread; a stuck one is named", "[outstanding_work][threads]") {
  cv::loop_pool pool(cv::loop_pool_options{.loops = 2});
  CHECK(pool.describe_outstanding_work() ==
        "member 0:\n  coverbs holds no outstanding work on this context\n"
        "member 1:\n  coverbs holds no outstanding work on this context\n");
  pool.run();
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::promise<void> entered;
  asio::post(pool[1].get_executor(), [&entered, gate] {
    entered.set_value();
    gate.wait();  // member 1's thread is stuck in this handler
  });
  entered.get_future().wait();
  const std::string text = pool.describe_outstanding_work(std::chrono::milliseconds(100));
  CHECK(text.find("member 0:\n  coverbs holds no outstanding work on this context\n  the pool's work guard keeps "
                  "its io_context::run() from returning until loop_pool::stop()\n") != std::string::npos);
  CHECK(text.find("member 1:\n  did not answer within 100 ms") != std::string::npos);
  // From a member's own thread it would wait for itself: refused.
  std::promise<std::string> from_member;
  asio::post(pool[0].get_executor(), [&] {
    try {
      pool.describe_outstanding_work();
      from_member.set_value("no exception");
    } catch (const std::logic_error& e) {
      from_member.set_value(e.what());
    }
  });
  CHECK(from_member.get_future().get().find("member 0's own thread") != std::string::npos);
  // Stopped while its thread is still in the handler: still not read from here (its thread may touch it).
  pool.stop();
  const std::string stopped = pool.describe_outstanding_work(std::chrono::milliseconds(100));
  CHECK(stopped.find("member 1:\n  did not answer within 100 ms") != std::string::npos);
  release.set_value();
  pool.stop();
  pool.join();
}

TEST_CASE("a loop pool's member threads are named coverbs-loop-N, as top -H and metrics::snapshot::threads show them",
          "[outstanding_work][threads]") {
  cv::loop_pool pool(cv::loop_pool_options{.loops = 2});
  pool.run();
  for (std::size_t i = 0; i < pool.size(); ++i) {
    std::promise<std::string> named;
    asio::post(pool[i].get_executor(), [&named] {
      char name[16] = {};
      pthread_getname_np(pthread_self(), name, sizeof name);
      named.set_value(name);
    });
    CHECK(named.get_future().get() == "coverbs-loop-" + std::to_string(i));
  }
  pool.stop();
  pool.join();
}
