// The CUDA backend as the builder, the engine reader, the cache and the runtime see it (compiled in every build:
// without CUDA it describes engines it can't load, and its kernel queries are the stubs of cuda_unavailable.cpp).
#include <fmt/format.h>

#include "backends/cuda/codegen/nvrtc_compiler.hpp"
#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/cuda_memory.hpp"
#include "backends/target.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/system_info.hpp"

namespace tensoracle {

namespace cuda {

std::size_t generated_entry_count(const std::string& kernel) {
  // fused_elementwise_nvrtc: contiguous, broadcast with int32 and with int64 indices (backends/cuda/codegen).
  return kernel == "fused_elementwise_nvrtc" ? 3 : 0;
}

}  // namespace cuda

namespace backends {

namespace {

// "9.0" of a CUDA target's description as {9, 0}.
std::pair<int, int> compute_capability(const nlohmann::json& target) {
  const std::string cc = target.at("compute_capability").get<std::string>();
  const auto dot = cc.find('.');
  if (dot == std::string::npos) throw Error(fmt::format("internal error: compute capability '{}'", cc));
  return {std::stoi(cc.substr(0, dot)), std::stoi(cc.substr(dot + 1))};
}

// The device a CUDA target names, among those this machine has; nullptr when there is none.
const CudaDeviceInfo* find_device(const SystemInfo& sys, const Target& target) {
  for (const CudaDeviceInfo& d : sys.cuda_devices) {
    if (d.index == target.device) return &d;
  }
  return nullptr;
}

// "9.0": a device's compute capability as engines and cache conditions record it.
std::string compute_capability_text(const CudaDeviceInfo& d) {
  return fmt::format("{}.{}", d.compute_capability_major, d.compute_capability_minor);
}

// Device memory, streams, events and CUDA graphs (cuda_memory.hpp; throwing stubs in builds without CUDA).
class CudaMemory final : public TargetMemory {
 public:
  void* allocate(int device, std::size_t bytes) const override { return cuda::device_malloc(device, bytes); }
  void release(int device, void* pointer) const noexcept override { cuda::device_free(device, pointer); }
  void copy_from_host(int device, void* destination, const void* source, std::size_t bytes) const override {
    cuda::copy_to_device(device, destination, source, bytes);
  }
  void copy_to_host(int device, void* destination, const void* source, std::size_t bytes) const override {
    cuda::copy_to_host(device, destination, source, bytes);
  }
  void fill(int device, void* pointer, unsigned char value, std::size_t bytes) const override {
    cuda::device_memset(device, pointer, value, bytes);
  }
  CUstream_st* create_stream(int device) const override { return cuda::stream_create(device); }
  void destroy_stream(int device, CUstream_st* stream) const noexcept override { cuda::stream_destroy(device, stream); }
  void synchronize(int device, CUstream_st* stream) const override { cuda::stream_synchronize(device, stream); }
  void* create_mark(int device) const override { return cuda::event_create(device); }
  void destroy_mark(int device, void* mark) const noexcept override { cuda::event_destroy(device, mark); }
  void record_mark(int device, void* mark, CUstream_st* stream) const override {
    cuda::event_record(device, mark, stream);
  }
  double elapsed_ms(int device, void* start, void* stop) const override {
    return cuda::event_elapsed_ms(device, start, stop);
  }
  void* capture(int device, CUstream_st* stream, const std::function<void()>& enqueue) const override {
    return cuda::graph_capture(device, stream, enqueue);
  }
  void replay(int device, void* captured, CUstream_st* stream) const override {
    cuda::graph_launch(device, captured, stream);
  }
  void destroy_capture(int device, void* captured) const noexcept override { cuda::graph_destroy(device, captured); }
};

class CudaBackend final : public Backend {
 public:
  const char* name() const override { return "the CUDA backend"; }
  bool built() const override { return cuda::backend_built(); }

  nlohmann::json describe_target(const Target& target) const override {
    const SystemInfo sys = system_info();
    const CudaDeviceInfo* d = find_device(sys, target);
    if (d == nullptr) {
      throw CudaError(
          fmt::format("target {}: no such CUDA device ({})", target.to_string(),
                      sys.cuda_unavailable_reason.empty() ? "index out of range" : sys.cuda_unavailable_reason));
    }
    return nlohmann::json{{"kind", "cuda"},
                          {"device_name", d->name},
                          {"compute_capability", compute_capability_text(*d)},
                          {"multiprocessor_count", d->multiprocessor_count},
                          {"total_memory_bytes", d->total_memory_bytes},
                          {"cuda_runtime_version", sys.cuda_runtime_version},
                          {"cublaslt_version", sys.cublaslt_version},
                          {"cudnn_version", sys.cudnn_version}};
  }

  nlohmann::json cache_conditions(const Target& target) const override {
    // The properties the GPU engine's compatibility depends on; not the index, UUID or PCI bus, so
    // identical GPUs share engines.
    const SystemInfo info = system_info();
    const CudaDeviceInfo* d = find_device(info, target);
    if (d == nullptr) {
      throw CudaError(
          fmt::format("cannot read the properties of CUDA device {} for the engine's conditions: {}", target.device,
                      info.cuda_unavailable_reason.empty() ? "no such device" : info.cuda_unavailable_reason));
    }
    return nlohmann::json{
        {"kind", "cuda"},
        {"name", d->name},
        {"compute_capability", compute_capability_text(*d)},
        {"memory_bus_width_bits", d->memory_bus_width_bits},
        {"l2_cache_bytes", d->l2_cache_bytes},
        {"shared_memory_per_block_bytes", d->shared_memory_per_block_bytes},
        {"shared_memory_per_block_optin_bytes", d->shared_memory_per_block_optin_bytes},
        {"shared_memory_per_multiprocessor_bytes", d->shared_memory_per_multiprocessor_bytes},
        {"texture_alignment_bytes", d->texture_alignment_bytes},
        {"multiprocessor_count", d->multiprocessor_count},
        {"integrated", d->integrated},
        {"ecc_enabled", d->ecc_enabled},
        {"total_memory_bytes", d->total_memory_bytes},
        {"cuda_runtime_version", info.cuda_runtime_version},
        {"cublaslt_version", info.cublaslt_version},
        {"cudnn_version", info.cudnn_version},
    };
  }

  bool device_graph_passes() const override { return true; }

  std::vector<std::string> kernel_candidates(const graph::Graph& graph, const graph::Layer& layer,
                                             Precision precision) const override {
    return cuda::kernel_candidates(graph, layer, precision);
  }
  std::size_t kernel_workspace_bytes(const std::string& kernel) const override {
    return cuda::kernel_workspace_bytes(kernel);
  }
  std::size_t kernel_workspace_for(const std::string& kernel, const graph::Graph& graph, const graph::Layer& layer,
                                   const std::vector<Dims>& shapes, Precision precision,
                                   const Target& target) const override {
    return cuda::kernel_workspace_for(kernel, graph, layer, shapes, precision, target.device);
  }
  std::size_t time_candidates(const graph::Graph& graph, const graph::Layer& layer, const std::vector<Dims>& shapes,
                              const std::vector<std::string>& candidates, Precision precision,
                              const Target& target) const override {
    return cuda::time_candidates(graph, layer, shapes, candidates, precision, target.device);
  }
  std::optional<GeneratedKernel> generate_step_kernel(const graph::Graph& graph, const graph::Layer& layer,
                                                      const std::string& kernel) const override {
    return cuda::generate_step_kernel(graph, layer, kernel);
  }
  std::vector<std::byte> compile_generated_kernel(const std::string& source, const nlohmann::json& target_description,
                                                  const std::string& what) const override {
    const auto [cc_major, cc_minor] = compute_capability(target_description);
    return cuda::compile_generated_kernel(source, cc_major, cc_minor, what);
  }
  std::string kernel_compiler() const override { return cuda::codegen::nvrtc_description(); }

  bool is_known_kernel(const std::string& kernel, const std::string& op) const override {
    return cuda::has_kernel(kernel, op);
  }
  std::size_t generated_entry_count(const std::string& kernel) const override {
    return cuda::generated_entry_count(kernel);
  }
  std::unique_ptr<TargetEngine> load(const EngineState& engine) const override { return cuda::load_engine(engine); }
  std::future<void> start_device(const nlohmann::json& target_description) const override {
    return cuda::start_device(target_description);
  }
  const TargetMemory& memory() const override { return memory_; }

 private:
  CudaMemory memory_;
};

}  // namespace

const Backend& cuda_backend() {
  static const CudaBackend backend;
  return backend;
}

}  // namespace backends

}  // namespace tensoracle
