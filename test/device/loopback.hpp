#pragma once
// Test helpers on a real device: an RC queue pair connected to itself (rxe loops it back) to prove keys
// work for RDMA, and the device's count of memory regions (from `rdma resource show`, the kernel's view).
#include <coverbs/buffer.hpp>
#include <coverbs/device.hpp>
#include <coverbs/protection_domain.hpp>

#include <catch2/catch.hpp>

#include <cstdio>
#include <regex>
#include <string>

namespace coverbs::test {

/// Memory regions the kernel counts for `device_name` (all processes), or -1 when it cannot be read.
inline long device_mr_count(const std::string& device_name) {
  FILE* p = ::popen("rdma resource show 2>/dev/null", "r");
  if (!p) return -1;
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p))
    out += buf;
  ::pclose(p);
  std::smatch m;
  const std::regex line(device_name + R"(:.*\bmr (\d+))");
  return std::regex_search(out, m, line) ? std::stol(m[1]) : -1;
}

class loopback {
public:
  loopback(device& dev, protection_domain& pd) {
    cq_ = ::ibv_create_cq(dev.native_handle(), 16, nullptr, nullptr, 0);
    REQUIRE(cq_);
    ibv_qp_init_attr init{};
    init.send_cq = init.recv_cq = cq_;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = init.cap.max_recv_wr = 16;
    init.cap.max_send_sge = init.cap.max_recv_sge = 1;
    qp_ = ::ibv_create_qp(pd.native_handle(), &init);
    REQUIRE(qp_);
    const gid_entry g = dev.default_gid(1);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    REQUIRE(::ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = qp_->qp_num;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = g.value.to_verbs();
    a.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(g.index);
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.port_num = 1;
    REQUIRE(::ibv_modify_qp(qp_, &a,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0);
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    REQUIRE(::ibv_modify_qp(qp_, &a,
                            IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                IBV_QP_MAX_QP_RD_ATOMIC) == 0);
  }
  loopback(const loopback&) = delete;
  loopback& operator=(const loopback&) = delete;
  ~loopback() {
    ::ibv_destroy_qp(qp_);
    ::ibv_destroy_cq(cq_);
  }

  /// Posts one RDMA write or read between `local` and `remote` and waits for its completion.
  ibv_wc_status run(ibv_wr_opcode op, registered_span local, remote_key remote) {
    ibv_sge sge = local.to_sge();
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = remote.addr;
    wr.wr.rdma.rkey = remote.rkey;
    ibv_send_wr* bad = nullptr;
    REQUIRE(::ibv_post_send(qp_, &wr, &bad) == 0);
    ibv_wc wc{};
    int n = 0;
    while ((n = ::ibv_poll_cq(cq_, 1, &wc)) == 0) {
    }
    REQUIRE(n == 1);
    return wc.status;
  }
  ibv_wc_status write(registered_span local, remote_key remote) { return run(IBV_WR_RDMA_WRITE, local, remote); }
  ibv_wc_status read(registered_span local, remote_key remote) { return run(IBV_WR_RDMA_READ, local, remote); }

private:
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
};

} // namespace coverbs::test
