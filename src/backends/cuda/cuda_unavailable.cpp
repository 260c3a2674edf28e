// The CUDA backend's entry points in builds without CUDA: no kernels, and CUDA engines can't be loaded.
#include <fmt/format.h>

#include "backends/cuda/codegen/nvrtc_compiler.hpp"
#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/cuda_memory.hpp"
#include "backends/target.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/pointer_location.hpp"

namespace tensoracle {

PointerLocation locate_pointer(const void*) noexcept { return {}; }

namespace cuda {

bool backend_built() { return false; }

bool has_kernel(const std::string&, const std::string&) { return false; }

std::vector<std::string> kernel_candidates(const graph::Graph&, const graph::Layer&, Precision) { return {}; }

std::size_t kernel_workspace_bytes(const std::string&) { return 0; }

std::size_t kernel_workspace_for(const std::string&, const graph::Graph&, const graph::Layer&, const std::vector<Dims>&,
                                 Precision, int) {
  return 0;
}

std::size_t time_candidates(const graph::Graph&, const graph::Layer&, const std::vector<Dims>&,
                            const std::vector<std::string>&, Precision, int) {
  return 0;
}

std::optional<backends::GeneratedKernel> generate_step_kernel(const graph::Graph&, const graph::Layer&,
                                                              const std::string&) {
  return std::nullopt;
}

std::vector<std::byte> compile_generated_kernel(const std::string&, int, int, const std::string& what) {
  throw UnsupportedError(fmt::format(
      "{}: this build of tensoracle has no CUDA backend to compile kernels (configure with TENSORACLE_CUDA=ON)", what));
}

namespace codegen {

std::vector<std::byte> compile_to_cubin(const std::string&, int, int, const std::string& what) {
  return compile_generated_kernel({}, 0, 0, what);
}

std::string nvrtc_description() { return "NVRTC (not in this build: no CUDA backend)"; }

}  // namespace codegen

std::future<void> start_device(const nlohmann::json& /*target_description*/) { return {}; }

std::unique_ptr<backends::TargetEngine> load_engine(const backends::EngineState& engine) {
  throw UnsupportedError(fmt::format(
      "{}: this is a CUDA engine, but this build of tensoracle has no CUDA backend (configure with TENSORACLE_CUDA=ON)",
      engine.display_name));
}

}  // namespace cuda

}  // namespace tensoracle

namespace tensoracle::cuda {

namespace {

[[noreturn]] void no_cuda() {
  throw UnsupportedError("this build of tensoracle has no CUDA backend (configure with TENSORACLE_CUDA=ON)");
}

}  // namespace

void* device_malloc(int, std::size_t) { no_cuda(); }
void device_free(int, void*) noexcept {}
void copy_to_device(int, void*, const void*, std::size_t) { no_cuda(); }
void copy_to_host(int, void*, const void*, std::size_t) { no_cuda(); }
void device_memset(int, void*, unsigned char, std::size_t) { no_cuda(); }
CUstream_st* stream_create(int) { no_cuda(); }
void stream_destroy(int, CUstream_st*) noexcept {}
void stream_synchronize(int, CUstream_st*) { no_cuda(); }
void* event_create(int) { no_cuda(); }
void event_destroy(int, void*) noexcept {}
void event_record(int, void*, CUstream_st*) { no_cuda(); }
float event_elapsed_ms(int, void*, void*) { no_cuda(); }
void* graph_capture(int, CUstream_st*, const std::function<void()>&) { no_cuda(); }
void graph_capture_into(int, CUstream_st*, void*&, const std::function<void()>&, const std::string&) { no_cuda(); }
void graph_launch(int, void*, CUstream_st*) { no_cuda(); }
void graph_destroy(int, void*) noexcept {}

}  // namespace tensoracle::cuda
