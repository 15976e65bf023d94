// metrics::read(): the core's counters (per-thread blocks, registration services and caches) and the
// windows layer's (window_statistics()) in one snapshot.
#include <coverbs/metrics.hpp>

#include "core/metrics.hpp"

namespace coverbs::metrics {

snapshot read() {
  snapshot s;
  s.enabled = enabled();
  detail::read_core_metrics(s);
  s.windows = window_statistics();
  return s;
}

}  // namespace coverbs::metrics
