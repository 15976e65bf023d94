#include <coverbs/access.hpp>

#include <cstdio>

namespace coverbs {

std::string to_string(access a) {
  static constexpr struct {
    access bit;
    const char* name;
  } names[] = {
      {access::local_write, "local_write"},
      {access::remote_write, "remote_write"},
      {access::remote_read, "remote_read"},
      {access::remote_atomic, "remote_atomic"},
      {access::mw_bind, "mw_bind"},
      {access::zero_based, "zero_based"},
      {access::on_demand, "on_demand"},
      {access::hugetlb, "hugetlb"},
      {access::relaxed_ordering, "relaxed_ordering"},
  };
  std::string s;
  access rest = a;
  for (const auto& n : names) {
    if (!has(a, n.bit)) continue;
    s += (s.empty() ? "" : "|") + std::string(n.name);
    rest &= ~n.bit;
  }
  if (rest != access::none) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%x", static_cast<unsigned>(rest));
    s += (s.empty() ? "" : "|") + std::string(hex);
  }
  return s.empty() ? "none" : s;
}

}  // namespace coverbs
