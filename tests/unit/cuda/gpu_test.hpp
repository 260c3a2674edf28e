// What the GPU tests that run kernel registry entries directly share: the GPU check, device buffers, half-precision
// values, and one step run as an engine runs it (prepared, the caller's buffers bound, launched plainly or captured in
// a CUDA graph and replayed).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_step.hpp"
#include "graph/graph.hpp"
#include "tensoracle/host_tensor.hpp"

namespace tensoracle::cuda::gpu_test {

// Whether a CUDA GPU is visible (one of compute capability 9.0 when `sm90`).
bool has_gpu(bool sm90 = false);

// Whether the run asks every GPU test to run (TENSORACLE_REQUIRE_GPU=1, as scripts/gpu-check.sh sets it).
bool gpu_required();

// In a TEST body: skips the test where no GPU is visible, and fails it instead under TENSORACLE_REQUIRE_GPU=1.
#define TENSORACLE_SKIP_WITHOUT_GPU()                                                                    \
  do {                                                                                                   \
    if (!::tensoracle::cuda::gpu_test::has_gpu()) {                                                      \
      if (::tensoracle::cuda::gpu_test::gpu_required()) FAIL() << "TENSORACLE_REQUIRE_GPU=1 but no GPU"; \
      GTEST_SKIP() << "no CUDA GPU on this machine";                                                     \
    }                                                                                                    \
  } while (0)

// Device memory of `bytes` and 64 spare bytes after them (room for a binding off alignment), freed at scope end.
// A failed allocation or copy is a test failure.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* base() const { return base_; }
  std::size_t bytes() const { return bytes_; }  // with the spare bytes
  void* at(std::size_t offset) const { return static_cast<char*>(base_) + offset; }

  template <typename T>
  void upload(const std::vector<T>& values, std::size_t offset = 0) const {
    copy_in(values.data(), values.size() * sizeof(T), offset);
  }
  template <typename T>
  std::vector<T> download(std::size_t count, std::size_t offset = 0) const {
    std::vector<T> values(count);
    copy_out(values.data(), count * sizeof(T), offset);
    return values;
  }
  void fill(int byte) const;  // every byte, the spare ones too

 private:
  void copy_in(const void* host, std::size_t size, std::size_t offset) const;
  void copy_out(void* host, std::size_t size, std::size_t offset) const;
  void* base_ = nullptr;
  std::size_t bytes_ = 0;
};

// An f16 or bf16 value (its bits) as float, and a float rounded to one.
float half_to_float(std::uint16_t bits, DataType dtype);
std::uint16_t float_to_half(float value, DataType dtype);

// `count` f16 or bf16 values drawn uniformly from [-scale, scale].
std::vector<std::uint16_t> random_halves(std::size_t count, DataType dtype, float scale, std::mt19937& rng);

// ‖got − want‖ / ‖want‖ of two f32 tensors of one size.
double rel_l2(const HostTensor& got, const HostTensor& want);

// A tensor of the step at `data`. A caller-bound one is unbound (null) while the step is prepared and bound to `data`
// before it is launched, as an enqueue binds the caller's buffers.
DeviceTensor device_tensor(DataType dtype, Dims shape, void* data, bool caller_bound = false);

// How run_entry launches the prepared step.
struct EntryLaunch {
  bool capture = false;       // captured into a CUDA graph, which is then replayed `replays` times
  bool programmatic = false;  // launched as an sm_90 engine launches its steps (StepLaunch::programmatic)
  int replays = 2;
  std::function<void(cudaStream_t)> before_each;  // before the plain launch and before each replay (e.g. poisoning)
  std::optional<std::size_t> workspace_bytes;     // the step's scratch (default: the entry's workspace_bytes)
  Precision precision = Precision::kFp16;
};

// Runs registry entry `kernel` on `layer` of `graph` as an engine step: prepared with `inputs` and `outputs` (the
// caller-bound ones unbound), bound, launched on a stream of its own (after the device has finished the work queued
// before, e.g. a poisoning cudaMemset) as `how` says, and synchronized. Returns false,
// after a test failure that names the kernel, where the entry is missing, does not take the layer, or fails to prepare
// or launch.
bool run_entry(const std::string& kernel, const graph::Graph& graph, const graph::Layer& layer,
               std::vector<DeviceTensor> inputs, std::vector<DeviceTensor> outputs, const EntryLaunch& how = {});

}  // namespace tensoracle::cuda::gpu_test
