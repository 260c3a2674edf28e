// The GPU tests' shared support (gpu_test.hpp): the GPU check, device buffers, half values, one entry run as a step.
#include "gpu_test.hpp"

#include <cmath>
#include <cstdlib>
#include <exception>
#include <memory>
#include <utility>

#include "tensoracle/float_convert.hpp"
#include "tensoracle/system_info.hpp"

namespace tensoracle::cuda::gpu_test {

bool has_gpu(bool sm90) {
  const auto devices = system_info().cuda_devices;
  if (devices.empty()) return false;
  return !sm90 || (devices[0].compute_capability_major == 9 && devices[0].compute_capability_minor == 0);
}

bool gpu_required() {
  const char* required = std::getenv("TENSORACLE_REQUIRE_GPU");
  return required != nullptr && std::string(required) == "1";
}

namespace {
constexpr std::size_t kSpareBytes = 64;
}  // namespace

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes + kSpareBytes) {
  const cudaError_t status = cudaMalloc(&base_, bytes_);
  EXPECT_EQ(status, cudaSuccess) << "cudaMalloc of " << bytes_ << " bytes: " << cudaGetErrorString(status);
}

DeviceBuffer::~DeviceBuffer() { cudaFree(base_); }

void DeviceBuffer::fill(int byte) const { EXPECT_EQ(cudaMemset(base_, byte, bytes_), cudaSuccess); }

void DeviceBuffer::copy_in(const void* host, std::size_t size, std::size_t offset) const {
  ASSERT_LE(offset + size, bytes_) << "upload past the buffer's end";
  if (size == 0) return;
  EXPECT_EQ(cudaMemcpy(at(offset), host, size, cudaMemcpyHostToDevice), cudaSuccess);
}

void DeviceBuffer::copy_out(void* host, std::size_t size, std::size_t offset) const {
  ASSERT_LE(offset + size, bytes_) << "download past the buffer's end";
  if (size == 0) return;
  EXPECT_EQ(cudaMemcpy(host, at(offset), size, cudaMemcpyDeviceToHost), cudaSuccess);
}

float half_to_float(std::uint16_t bits, DataType dtype) {
  return dtype == DataType::kF16 ? f16_bits_to_f32(bits) : bf16_bits_to_f32(bits);
}

std::uint16_t float_to_half(float value, DataType dtype) {
  return dtype == DataType::kF16 ? f32_to_f16_bits(value) : f32_to_bf16_bits(value);
}

std::vector<std::uint16_t> random_halves(std::size_t count, DataType dtype, float scale, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<std::uint16_t> values(count);
  for (auto& v : values) v = float_to_half(dist(rng), dtype);
  return values;
}

double rel_l2(const HostTensor& got, const HostTensor& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got.data<float>()[i]) - want.data<float>()[i];
    num += d * d;
    den += static_cast<double>(want.data<float>()[i]) * want.data<float>()[i];
  }
  return std::sqrt(num / den);
}

DeviceTensor device_tensor(DataType dtype, Dims shape, void* data, bool caller_bound) {
  DeviceTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = data;
  t.caller_buffer = caller_bound;
  return t;
}

namespace {

// The prepared step's launch: plain, or captured and replayed. Ends a capture that a throwing launch left open.
void launch_step(const KernelEntry& entry, const StepLaunch& launch, const StepState& state, const EntryLaunch& how) {
  cudaStream_t stream = launch.stream;
  if (!how.capture) {
    if (how.before_each) how.before_each(stream);
    entry.launch(launch, state);
    return;
  }
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  try {
    entry.launch(launch, state);
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    throw;
  }
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int i = 0; i < how.replays && exec != nullptr; ++i) {
    if (how.before_each) how.before_each(stream);
    EXPECT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  }
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

}  // namespace

bool run_entry(const std::string& kernel, const graph::Graph& graph, const graph::Layer& layer,
               std::vector<DeviceTensor> inputs, std::vector<DeviceTensor> outputs, const EntryLaunch& how) {
  const KernelEntry* entry = find_kernel_entry(kernel);
  if (entry == nullptr) {
    ADD_FAILURE() << "no kernel entry " << kernel << " in this build";
    return false;
  }
  if (!entry->supports(graph, layer, how.precision)) {
    ADD_FAILURE() << kernel << " does not take layer '" << layer.name << "'";
    return false;
  }
  const graph::AttrReader attrs(layer.attrs, layer.name, layer.op);
  StepLaunch launch;
  launch.layer = &layer;
  launch.attrs = &attrs;
  launch.precision = how.precision;
  launch.programmatic = how.programmatic;
  launch.inputs = std::move(inputs);
  launch.outputs = std::move(outputs);
  // The caller's buffers are unbound while the step is prepared; their addresses are bound afterwards.
  std::vector<void*> input_addresses, output_addresses;
  for (DeviceTensor& t : launch.inputs) {
    input_addresses.push_back(t.data);
    if (t.caller_buffer) t.data = nullptr;
  }
  for (DeviceTensor& t : launch.outputs) {
    output_addresses.push_back(t.data);
    if (t.caller_buffer) t.data = nullptr;
  }
  const std::size_t workspace_bytes = how.workspace_bytes.value_or(entry->workspace_bytes);
  const DeviceBuffer workspace(workspace_bytes);
  launch.workspace = workspace_bytes != 0 ? workspace.base() : nullptr;
  launch.workspace_bytes = workspace_bytes;
  LibraryHandles handles;
  launch.handles = &handles;

  std::unique_ptr<StepState> state;
  try {
    state = entry->prepare(launch);
  } catch (const std::exception& e) {
    ADD_FAILURE() << kernel << " did not prepare: " << e.what();
    return false;
  }
  for (std::size_t i = 0; i < launch.inputs.size(); ++i) launch.inputs[i].data = input_addresses[i];
  for (std::size_t i = 0; i < launch.outputs.size(); ++i) launch.outputs[i].data = output_addresses[i];

  // The step's stream does not wait for the default stream: what the test queued there (uploads, a poisoning
  // cudaMemset, which returns before it is done) finishes first.
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    ADD_FAILURE() << "cudaStreamCreateWithFlags failed";
    return false;
  }
  launch.stream = stream;
  bool launched = true;
  try {
    launch_step(*entry, launch, *state, how);
  } catch (const std::exception& e) {
    ADD_FAILURE() << kernel << " did not launch: " << e.what();
    launched = false;
  }
  const cudaError_t status = cudaStreamSynchronize(stream);
  EXPECT_EQ(status, cudaSuccess) << kernel << ": " << cudaGetErrorString(status);
  cudaStreamDestroy(stream);
  return launched && status == cudaSuccess && !::testing::Test::HasFatalFailure();
}

}  // namespace tensoracle::cuda::gpu_test
