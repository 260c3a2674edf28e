// The CUDA kernel entry of fused_elementwise layers: launches the entries generated and compiled at build time.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstddef>
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

// A fused_elementwise step at one set of shapes: the generated entry that runs and its argument block but for the
// pointers, which the launch fills in (cg::FusedPointers).
struct FusedPlan {
  const void* entry = nullptr;  // nullptr: the output is empty, nothing to launch
  bool contiguous = false;      // entry 0; else entry 1 (int32 indices) or 2 (int64)
  // Entry 0: `vectorized` is set at launch, when every pointer has the alignment vector accesses need (16 bytes at
  // most; 1 for the scalar inputs, which are read one element at a time). The grid of either case.
  cg::FusedContiguousArgs contiguous_args{};
  std::size_t out_alignment = 1;
  std::array<std::size_t, cg::kMaxInputs> in_alignment{};
  unsigned vector_blocks = 1;
  unsigned element_blocks = 1;
  // Entries 1 and 2: the argument block of the index width `index32` names. `broadcast_vectors`: the strides allow
  // vector accesses (cg::FusedBroadcastArgs); the launch sets `vectorized` when the pointers have the alignments above
  // too (1 for the inputs that do not step along the innermost axis).
  bool index32 = false;
  cg::FusedBroadcastArgs<std::int32_t> broadcast32{};
  cg::FusedBroadcastArgs<std::int64_t> broadcast64{};
  unsigned broadcast_blocks = 1;
  bool broadcast_vectors = false;
  unsigned broadcast_vector_blocks = 1;
};

// The elements a vector access of the step's generated kernels moves (cg::vector_width of its dtypes).
int step_vector_width(const StepLaunch& launch) {
  std::vector<DataType> in_dtypes;
  in_dtypes.reserve(launch.inputs.size());
  for (const auto& t : launch.inputs) in_dtypes.push_back(t.dtype);
  return cg::vector_width(in_dtypes, launch.outputs[0].dtype);
}

// The alignments vector accesses of `width` elements need: the vector's bytes (16 at most) for the output and for the
// inputs of bit i in `vector_inputs`, 1 for the others (read one element at a time).
void plan_vector_alignments(const StepLaunch& launch, int width, std::uint32_t vector_inputs, FusedPlan& plan) {
  auto alignment = [&](DataType dtype) {
    return std::min<std::size_t>(16, static_cast<std::size_t>(width) * element_size(dtype));
  };
  plan.out_alignment = alignment(launch.outputs[0].dtype);
  for (std::size_t i = 0; i < launch.inputs.size(); ++i)
    plan.in_alignment[i] = (vector_inputs & (1U << i)) != 0 ? alignment(launch.inputs[i].dtype) : 1;
}

void plan_contiguous(const StepLaunch& launch, std::uint32_t scalar_mask, std::int64_t n, FusedPlan& plan) {
  const int width = step_vector_width(launch);
  plan_vector_alignments(launch, width, ~scalar_mask, plan);
  plan.contiguous_args = cg::FusedContiguousArgs{n, scalar_mask, 0};
  auto blocks = [&](bool vectorized) {
    const std::int64_t vectors = vectorized ? n / width : 0;
    const std::int64_t threads = std::max<std::int64_t>(vectors, n - vectors * width);
    return static_cast<unsigned>(
        std::clamp<std::int64_t>((threads + cg::kThreads - 1) / cg::kThreads, 1, kMaxContiguousBlocks));
  };
  plan.vector_blocks = blocks(true);
  plan.element_blocks = blocks(false);
}

// Whether the broadcast entry may move vectors: the innermost merged axis is whole vectors and every input steps 0 or
// 1 along it, those stepping 1 with every stride whole vectors (so each vector starts aligned); those inputs and the
// output then need the contiguous entry's alignment.
void plan_broadcast_vectors(const StepLaunch& launch, const StridePlan<cg::kMaxInputs>& axes, std::int64_t n,
                            FusedPlan& plan) {
  if (axes.rank == 0) return;
  const int width = step_vector_width(launch);
  const int last = axes.rank - 1;
  if (axes.dims[last] % width != 0) return;
  std::uint32_t stepping = 0;
  for (std::size_t k = 0; k < launch.inputs.size(); ++k) {
    const std::int64_t inner = axes.strides[k][last];
    if (inner == 0) continue;
    if (inner != 1) return;
    for (int a = 0; a < last; ++a) {
      if (axes.strides[k][a] % width != 0) return;
    }
    stepping |= 1U << k;
  }
  plan_vector_alignments(launch, width, stepping, plan);
  plan.broadcast_vectors = true;
  plan.broadcast_vector_blocks = grid_for(n / width);
}

template <typename Index>
cg::FusedBroadcastArgs<Index> broadcast_args(const StridePlan<cg::kMaxInputs>& axes, int rank, std::int64_t n) {
  cg::FusedBroadcastArgs<Index> args{};
  args.n = static_cast<Index>(n);
  // The plan's axes, right-aligned in the kernel's rank (merging only ever lowers the rank).
  args.skip = static_cast<Index>(rank - axes.rank);
  for (int a = 0; a < rank; ++a) {
    const int p = a - (rank - axes.rank);
    args.dims[a] = static_cast<Index>(p >= 0 ? axes.dims[p] : 1);
    for (int k = 0; k < cg::kMaxInputs; ++k) args.strides[k][a] = static_cast<Index>(p >= 0 ? axes.strides[k][p] : 0);
  }
  return args;
}

FusedPlan prepare_fused_elementwise(const StepLaunch& launch) {
  if (launch.compiled == nullptr || launch.compiled->size() != 3)
    launch.attrs->fail("the engine holds no compiled kernel for this step (rebuild the engine)");
  const DeviceTensor& out = launch.outputs.at(0);
  const std::int64_t n = volume(out.shape);
  FusedPlan plan;
  if (n == 0) return plan;
  if (launch.inputs.empty() || launch.inputs.size() > static_cast<std::size_t>(cg::kMaxInputs))
    launch.attrs->fail("the generated kernel takes 1 to 16 inputs");
  bool contiguous = true;
  std::uint32_t scalar_mask = 0;
  for (std::size_t i = 0; i < launch.inputs.size(); ++i) {
    const DeviceTensor& in = launch.inputs[i];
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
    plan.contiguous = true;
    plan.entry = (*launch.compiled)[0];
    plan_contiguous(launch, scalar_mask, n, plan);
    return plan;
  }
  std::array<std::vector<std::int64_t>, cg::kMaxInputs> strides;
  for (int k = 0; k < cg::kMaxInputs; ++k) {
    strides[static_cast<std::size_t>(k)] =
        static_cast<std::size_t>(k) < launch.inputs.size()
            ? broadcast_strides(launch.inputs[static_cast<std::size_t>(k)].shape, out.shape)
            : std::vector<std::int64_t>(static_cast<std::size_t>(out.shape.rank()), 0);
  }
  StridePlan<cg::kMaxInputs> axes;
  if (out.shape.rank() > cg::kMaxRank || !make_stride_plan<cg::kMaxInputs>(out.shape.values(), strides, axes))
    launch.attrs->fail("the generated kernel handles at most 8 axes");
  plan.broadcast_blocks = grid_for(n);
  plan_broadcast_vectors(launch, axes, n, plan);
  if (fits_index32(n)) {
    plan.index32 = true;
    plan.entry = (*launch.compiled)[1];
    plan.broadcast32 = broadcast_args<std::int32_t>(axes, out.shape.rank(), n);
  } else {
    plan.entry = (*launch.compiled)[2];
    plan.broadcast64 = broadcast_args<std::int64_t>(axes, out.shape.rank(), n);
  }
  return plan;
}

// Whether every pointer has the alignment the plan's vector accesses need.
bool vectors_aligned(const StepLaunch& launch, const FusedPlan& plan, const cg::FusedPointers& pointers) {
  bool aligned = reinterpret_cast<std::uintptr_t>(pointers.out) % plan.out_alignment == 0;
  for (std::size_t i = 0; i < launch.inputs.size(); ++i)
    aligned = aligned && reinterpret_cast<std::uintptr_t>(pointers.in[i]) % plan.in_alignment[i] == 0;
  return aligned;
}

void launch_fused_elementwise(const StepLaunch& launch, const FusedPlan& plan) {
  if (plan.entry == nullptr) return;
  cg::FusedPointers pointers{};
  pointers.out = launch.outputs[0].data;
  for (std::size_t i = 0; i < launch.inputs.size(); ++i) pointers.in[i] = launch.inputs[i].data;
  if (plan.contiguous) {
    const bool vectorized = vectors_aligned(launch, plan, pointers);
    cg::FusedContiguousArgs args = plan.contiguous_args;
    args.vectorized = vectorized ? 1 : 0;
    void* params[] = {&pointers, &args};
    cudaLaunchAttribute attribute{};
    const cudaLaunchConfig_t config = step_launch_config(
        launch, dim3(vectorized ? plan.vector_blocks : plan.element_blocks), dim3(cg::kThreads), 0, attribute);
    TENSORACLE_CUDA_CHECK(cudaLaunchKernelExC(&config, plan.entry, params), layer_name(launch));
    return;
  }
  const bool vectorized = plan.broadcast_vectors && vectors_aligned(launch, plan, pointers);
  cg::FusedBroadcastArgs<std::int32_t> args32 = plan.broadcast32;
  cg::FusedBroadcastArgs<std::int64_t> args64 = plan.broadcast64;
  args32.vectorized = vectorized ? 1 : 0;
  args64.vectorized = vectorized ? 1 : 0;
  void* args = plan.index32 ? static_cast<void*>(&args32) : static_cast<void*>(&args64);
  void* params[] = {&pointers, args};
  cudaLaunchAttribute attribute{};
  const cudaLaunchConfig_t config =
      step_launch_config(launch, dim3(vectorized ? plan.broadcast_vector_blocks : plan.broadcast_blocks),
                         dim3(cg::kThreads), 0, attribute);
  TENSORACLE_CUDA_CHECK(cudaLaunchKernelExC(&config, plan.entry, params), layer_name(launch));
}

bool supports_fused_elementwise(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  return cg::supports_fused_layer(graph, layer);
}

}  // namespace

void register_fused_elementwise_kernels(std::vector<KernelEntry>& kernels) {
  kernels.push_back(prepared_kernel<prepare_fused_elementwise, launch_fused_elementwise>(
      "fused_elementwise_nvrtc", "fused_elementwise", supports_fused_elementwise, 0));
}

}  // namespace tensoracle::cuda
