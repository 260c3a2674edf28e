// system_info(): the library version, whether CUDA was built in, and the CUDA devices present.
#include "tensoracle/system_info.hpp"

#include "tensoracle/version.hpp"

#ifdef TENSORACLE_HAVE_CUDA
#include "backends/cuda/device_query.hpp"
#endif

namespace tensoracle {

SystemInfo system_info() {
  SystemInfo info;
  info.library_version = TENSORACLE_VERSION_STRING;
#ifdef TENSORACLE_HAVE_CUDA
  info.cuda_backend_built = true;
  cuda::query_devices(info);
#else
  info.cuda_unavailable_reason =
      "this build of tensoracle has no CUDA backend (configured with TENSORACLE_CUDA=OFF or without nvcc)";
#endif
  return info;
}

}  // namespace tensoracle
