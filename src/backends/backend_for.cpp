// backend_for: the one place that picks a target kind's backend.
#include "backends/target.hpp"

namespace tensoracle::backends {

const Backend& backend_for(TargetKind kind) {
  switch (kind) {
    case TargetKind::kCpu: return cpu_backend();
    case TargetKind::kCuda: return cuda_backend();
  }
  return cpu_backend();  // unreachable: every TargetKind is listed above
}

}  // namespace tensoracle::backends
