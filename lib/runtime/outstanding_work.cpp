// outstanding_work.hpp: asks every coverbs object enrolled with an execution context what it holds.
#include <coverbs/outstanding_work.hpp>

#include "core/io_owner.hpp"

#include <algorithm>
#include <tuple>

namespace coverbs {

std::vector<work_holder> outstanding_work(boost::asio::execution_context& ctx) {
  std::vector<work_holder> out;
  detail::describe_owners(ctx, out);
  std::sort(out.begin(), out.end(),
            [](const work_holder& a, const work_holder& b) { return std::tie(a.kind, a.name) < std::tie(b.kind, b.name); });
  return out;
}

std::string describe(const std::vector<work_holder>& holders) {
  if (holders.empty()) return "coverbs holds no outstanding work on this context\n";
  std::string s;
  for (const work_holder& h : holders) {
    s += h.kind + ' ' + h.name + ": ";
    if (h.operations) s += std::to_string(h.operations) + (h.operations == 1 ? " operation - " : " operations - ");
    s += h.what + '\n';
  }
  return s;
}

std::string describe_outstanding_work(boost::asio::execution_context& ctx) { return describe(outstanding_work(ctx)); }

}  // namespace coverbs
