// The CUDA kernel entry of fused_elementwise layers: launches the entries generated and compiled at build time.
#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <vector>

#include "backends/cuda/codegen/elementwise_codegen.hpp"
#include "backends/cuda/cuda_step.hpp"
#include "backends/cuda/kernels/common.cuh"

namespace tensoracle::cuda {
namespace {

using namespace kernels;  // NOLINT(google-build-using-namespace): the shared helpers of this backend's kernels
namespace cg = codegen;

// Grids of the contiguous entry: one vector access per thread (a grid-stride loop covers the rest).
constexpr std::int64_t kMaxContiguousBlocks = std::int64_t{1} << 20;

void launch_contiguous(const StepLaunch& launch, const void* entry, const cg::FusedPointers& pointers,
                       std::uint32_t scalar_mask, std::int64_t n) {
  std::vector<DataType> in_dtypes;
  in_dtypes.reserve(launch.inputs.size());
  for (const auto& t : launch.inputs) in_dtypes.push_back(t.dtype);
  const DeviceTensor& out = launch.outputs[0];
  const int width = cg::vector_width(in_dtypes, out.dtype);
  // Vector accesses need every non-scalar pointer aligned to the vector's bytes (16 at most).
  auto aligned = [&](const void* p, DataType dtype) {
    const std::size_t bytes = std::min<std::size_t>(16, static_cast<std::size_t>(width) * element_size(dtype));
    return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
  };
  bool vectorized = aligned(out.data, out.dtype);
  for (std::size_t i = 0; i < launch.inputs.size(); ++i) {
    if ((scalar_mask & (1U << i)) == 0)
      vectorized = vectorized && aligned(launch.inputs[i].data, launch.inputs[i].dtype);
  }
  cg::FusedContiguousArgs args{n, scalar_mask, vectorized ? 1 : 0};
  const std::int64_t vectors = vectorized ? n / width : 0;
  const std::int64_t threads = std::max<std::int64_t>(vectors, n - vectors * width);
  const std::int64_t blocks =
      std::clamp<std::int64_t>((threads + cg::kThreads - 1) / cg::kThreads, 1, kMaxContiguousBlocks);
  void* params[] = {const_cast<cg::FusedPointers*>(&pointers), &args};
  TENSORACLE_CUDA_CHECK(
      cudaLaunchKernel(entry, dim3(static_cast<unsigned>(blocks)), dim3(cg::kThreads), params, 0, launch.stream),
      layer_name(launch));
}

template <typename Index>
void launch_broadcast(const StepLaunch& launch, const void* entry, const cg::FusedPointers& pointers,
                      const StridePlan<cg::kMaxInputs>& plan, int rank, std::int64_t n) {
  cg::FusedBroadcastArgs<Index> args{};
  args.n = static_cast<Index>(n);
  // The plan's axes, right-aligned in the kernel's rank (merging only ever lowers the rank).
  args.skip = static_cast<Index>(rank - plan.rank);
  for (int a = 0; a < rank; ++a) {
    const int p = a - (rank - plan.rank);
    args.dims[a] = static_cast<Index>(p >= 0 ? plan.dims[p] : 1);
    for (int k = 0; k < cg::kMaxInputs; ++k) args.strides[k][a] = static_cast<Index>(p >= 0 ? plan.strides[k][p] : 0);
  }
  void* params[] = {const_cast<cg::FusedPointers*>(&pointers), &args};
  TENSORACLE_CUDA_CHECK(cudaLaunchKernel(entry, dim3(grid_for(n)), dim3(cg::kThreads), params, 0, launch.stream),
                        layer_name(launch));
}

void launch_fused_elementwise(const StepLaunch& launch) {
  if (launch.compiled == nullptr || launch.compiled->size() != 3)
    launch.attrs->fail("the engine holds no compiled kernel for this step (rebuild the engine)");
  const DeviceTensor& out = launch.outputs.at(0);
  const std::int64_t n = volume(out.shape);
  if (n == 0) return;
  if (launch.inputs.empty() || launch.inputs.size() > static_cast<std::size_t>(cg::kMaxInputs))
    launch.attrs->fail("the generated kernel takes 1 to 16 inputs");
  cg::FusedPointers pointers{};
  pointers.out = out.data;
  bool contiguous = true;
  std::uint32_t scalar_mask = 0;
  for (std::size_t i = 0; i < launch.inputs.size(); ++i) {
    const DeviceTensor& in = launch.inputs[i];
    pointers.in[i] = in.data;
    // An input with the output's element count broadcasts only over size-1 axes: same linear order.
    const std::int64_t count = volume(in.shape);
    if (count == n) continue;
    if (count == 1) {
      scalar_mask |= 1U << i;
      continue;
    }
    contiguous = false;
  }
  if (contiguous) {
    launch_contiguous(launch, (*launch.compiled)[0], pointers, scalar_mask, n);
    return;
  }
  std::array<std::vector<std::int64_t>, cg::kMaxInputs> strides;
  for (int k = 0; k < cg::kMaxInputs; ++k) {
    strides[static_cast<std::size_t>(k)] =
        static_cast<std::size_t>(k) < launch.inputs.size()
            ? broadcast_strides(launch.inputs[static_cast<std::size_t>(k)].shape, out.shape)
            : std::vector<std::int64_t>(static_cast<std::size_t>(out.shape.rank()), 0);
  }
  StridePlan<cg::kMaxInputs> plan;
  if (out.shape.rank() > cg::kMaxRank || !make_stride_plan<cg::kMaxInputs>(out.shape.values(), strides, plan))
    launch.attrs->fail("the generated kernel handles at most 8 axes");
  if (fits_index32(n)) {
    launch_broadcast<std::int32_t>(launch, (*launch.compiled)[1], pointers, plan, out.shape.rank(), n);
  } else {
    launch_broadcast<std::int64_t>(launch, (*launch.compiled)[2], pointers, plan, out.shape.rank(), n);
  }
}

bool supports_fused_elementwise(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  return cg::supports_fused_layer(graph, layer);
}

}  // namespace

void register_fused_elementwise_kernels(std::vector<KernelEntry>& kernels) {
  kernels.push_back(KernelEntry{"fused_elementwise_nvrtc", "fused_elementwise", supports_fused_elementwise,
                                launch_fused_elementwise, 0});
}

}  // namespace tensoracle::cuda
