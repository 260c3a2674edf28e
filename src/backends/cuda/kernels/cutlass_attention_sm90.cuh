// CUTLASS's Hopper FMHA forward kernels behind cutlass_attention_sm90.hpp: one template over element type, head dim,
// mask and schedule, instantiated by cutlass_attention_sm90{,_pingpong,_pingpong_wide,_pingpong_tall}{,_bf16}.cu
// (compiled for sm_90a only). The kernels come from the FMHA headers CUTLASS ships beside its library
// (examples/88_hopper_fmha, on the include path: src/CMakeLists.txt).
#pragma once

#include <cutlass/cutlass.h>
#include <cutlass/device_kernel.h>
#include <cutlass/kernel_hardware_info.h>
#include <cute/tensor.hpp>
// CUTLASS's FMHA headers (examples/88_hopper_fmha).
#include <collective/fmha_fusion.hpp>
#include <kernel/fmha_kernel_builder.hpp>

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>

#include "backends/cuda/kernels/cutlass_attention_sm90.hpp"
#include "backends/cuda/kernels/cutlass_attention_sm90_scheduler.cuh"
#include "backends/cuda/kernels/cutlass_sm90_shared_memory.cuh"
#include "backends/cuda/kernels/step_wait.cuh"
#include "tensoracle/error.hpp"

namespace tensoracle::cuda::sm90 {

// CUTLASS's device_kernel with the step's programmatic wait in front: CUTLASS's FMHA kernels do not wait for a
// preceding kernel themselves, so the whole block waits for it before the kernel's first load (launched without the
// programmatic attribute the wait does nothing), then lets the next kernel start launching (its blocks take the SMs
// this kernel leaves; the persistent kernels' grids fill every SM at most once).
template <class Kernel>
__global__ void __launch_bounds__(Kernel::MaxThreadsPerBlock, Kernel::MinBlocksPerMultiprocessor)
    programmatic_device_kernel(CUTLASS_GRID_CONSTANT typename Kernel::Params const params) {
  kernels::wait_for_preceding_steps();
  extern __shared__ char smem[];
  Kernel op;
  op(params, smem);
}

// Which keys a kernel masks: none (every key tile whole), those after the diagonal (causal, top-left aligned; the
// tiles on the diagonal only, so whole key tiles too), or the missing keys of a partial last tile (any key count).
enum class KeyMask { kNone, kCausal, kPartialLastTile };

// The FMHA kernel as CUTLASS's builder makes it; kCausalPersistent: the persistent (ping-pong) kernel that its builder
// makes, with query tiles dealt by CausalBalancedTileScheduler instead of CUTLASS's scheduler.
template <typename Element, typename TileShape, typename Stride, typename Fusion, typename Policy, typename Consumers,
          bool kCausalPersistent>
struct KernelOf {
  using type = typename cutlass::fmha::kernel::FmhaBuilder<Element, float, float, TileShape, Stride, Stride, Stride,
                                                           Fusion, Policy, Consumers>::Kernel;
};
template <typename Element, typename TileShape, typename Stride, typename Fusion, typename Policy, typename Consumers>
struct KernelOf<Element, TileShape, Stride, Fusion, Policy, Consumers, true> {
  static_assert(std::is_same_v<Policy, cutlass::gemm::KernelTmaWarpSpecializedPingpong>);
  // The options CUTLASS's builder adds for a ping-pong kernel (persistent, Q loaded by a warp of its own), on the
  // cooperative builder's mainloop and epilogue, as that builder does.
  using Persistent = cutlass::fmha::kernel::Option<cutlass::fmha::kernel::Tag::kIsPersistent, cute::true_type>;
  using LoadsQSeparately =
      cutlass::fmha::kernel::Option<cutlass::fmha::kernel::Tag::kLoadsQSeparately, cute::true_type>;
  using Builder = cutlass::fmha::kernel::FmhaBuilder<Element, float, float, TileShape, Stride, Stride, Stride, Fusion,
                                                     cutlass::gemm::KernelTmaWarpSpecializedCooperative, Consumers,
                                                     Persistent, LoadsQSeparately>;
  using type = cutlass::fmha::kernel::FmhaKernelTmaWarpSpecialized<
      typename Builder::CollectiveMainloop, typename Builder::CollectiveEpilogue, CausalBalancedTileScheduler,
      Consumers, Persistent, LoadsQSeparately>;
};

// Tiles of kQueryTile queries (128; kPingpongTall 192) by kKeyTile keys (64 at head dim 64 for kCooperative and
// kPingpong, else 128); a consumer warpgroup for each 64 query rows and a producer warpgroup loading Q, K and V through
// the bulk tensor copy engine, which fills the rows past a sequence's end with zeros; kSchedule says how blocks take
// tiles (cutlass_attention_sm90.hpp). A key count that is whole tiles takes the kernel without kPartialLastTile's mask
// (can_implement), which costs a pass over the last tile's scores.
template <typename Element, int kHeadDim, KeyMask kMask, AttentionSchedule kSchedule>
class CutlassFusedAttention final : public FusedAttention {
 public:
  static constexpr int kKeyTile = kHeadDim == 64 && !head_dim_64_only(kSchedule) ? 64 : 128;
  // kPingpongTall: three consumer warpgroups of 64 query rows; the others two.
  static constexpr int kConsumers = kSchedule == AttentionSchedule::kPingpongTall ? 3 : 2;
  static constexpr int kQueryTile = 64 * kConsumers;

 private:
  using TileShape = cute::Shape<cute::Int<kQueryTile>, cute::Int<kKeyTile>, cute::Int<kHeadDim>>;
  using Stride = cute::tuple<int, cute::_1, cute::tuple<int, int>>;  // (row, head dim, (batch, head))
  using StrideLse = cute::tuple<cute::_1, cute::tuple<int, int>>;    // (row, (batch, head))
  using Fusion = std::conditional_t<
      kMask == KeyMask::kCausal, cutlass::fmha::collective::CausalFusion,
      std::conditional_t<kMask == KeyMask::kPartialLastTile, cutlass::fmha::collective::ResidualFusion,
                         cutlass::fmha::collective::DefaultFusion>>;
  using Policy = std::conditional_t<kSchedule == AttentionSchedule::kCooperative,
                                    cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                    cutlass::gemm::KernelTmaWarpSpecializedPingpong>;
  using Consumers = cutlass::fmha::kernel::Option<cutlass::fmha::kernel::Tag::kNumMmaWarpGroups, cute::Int<kConsumers>>;
  using Kernel = typename KernelOf<Element, TileShape, Stride, Fusion, Policy, Consumers,
                                   kMask == KeyMask::kCausal && kSchedule != AttentionSchedule::kCooperative>::type;

 public:
  // Raises the kernel's shared-memory limit on the current device (host work, once per plan's owner).
  CutlassFusedAttention(int device, int sm_count) {
    hardware_.device_id = device;
    hardware_.sm_count = sm_count;
    allow_shared_storage<Kernel>(programmatic_device_kernel<Kernel>, "CUTLASS's sm_90 attention");
  }

  bool can_implement(const AttentionProblem& p) const override {
    constexpr auto kMax = std::numeric_limits<int>::max();
    if (p.batch <= 0 || p.heads <= 0 || p.sq <= 0 || p.skv <= 0 || p.head_dim != kHeadDim) return false;
    if ((p.skv % kKeyTile == 0) == (kMask == KeyMask::kPartialLastTile)) return false;
    if (p.batch * p.heads * p.sq > kMax || p.skv > kMax) return false;
    for (const std::int64_t* strides : {p.q_stride, p.k_stride, p.v_stride, p.o_stride}) {
      for (int i = 0; i < 3; ++i) {
        if (strides[i] <= 0 || strides[i] > kMax || strides[i] % 8 != 0) return false;
      }
    }
    // CUTLASS's check also asks for a query count that is a multiple of 8 (its generic operand alignment), which the
    // kernel does not need: Q's bulk copies bound each coordinate on its own (rows past the sequence's end read as
    // zeros, not the next batch's or head's rows), the output's bulk stores drop those rows, and the log-sum-exp's
    // stores are predicated on the row. So it is asked about the count rounded up (ViT's 197 queries).
    AttentionProblem aligned = p;
    aligned.sq = (p.sq + 7) / 8 * 8;
    return aligned.batch * aligned.heads * aligned.sq <= kMax && Kernel::can_implement(arguments(aligned, nullptr));
  }

  std::size_t workspace_bytes(const AttentionProblem& p) const override {
    return static_cast<std::size_t>(p.batch * p.heads * p.sq) * sizeof(float);
  }

  void plan(const AttentionProblem& p, void* workspace, const char* /*context*/) override {
    params_ = Kernel::to_underlying_arguments(arguments(p, static_cast<float*>(workspace)), nullptr);
    // The kernel's arguments take 1/sqrt(D); the layer's scale replaces it (exp2 of scale·log2(e)·s).
    params_.mainloop.scale_softmax = p.scale;
    params_.mainloop.scale_softmax_log2 = static_cast<float>(static_cast<double>(p.scale) * M_LOG2E);
  }

  void run(cudaStream_t stream, bool programmatic, const char* context) override {
    cudaLaunchConfig_t config{};
    config.gridDim = Kernel::get_grid_shape(params_);
    config.blockDim = Kernel::get_block_shape();
    config.dynamicSmemBytes = Kernel::SharedStorageSize;
    config.stream = stream;
    cudaLaunchAttribute attribute{};
    kernels::allow_programmatic_start(config, attribute, programmatic);
    const cudaError_t status = cudaLaunchKernelEx(&config, programmatic_device_kernel<Kernel>, params_);
    if (status != cudaSuccess) {
      cudaGetLastError();
      throw CudaError(
          fmt::format("{}: CUTLASS's sm_90 attention did not launch: {}", context, cudaGetErrorString(status)));
    }
  }

 private:
  static Stride stride_of(const std::int64_t (&s)[3]) {
    return Stride{static_cast<int>(s[0]), cute::_1{}, cute::make_tuple(static_cast<int>(s[2]), static_cast<int>(s[1]))};
  }

  typename Kernel::Arguments arguments(const AttentionProblem& p, float* lse) const {
    const int b = static_cast<int>(p.batch), h = static_cast<int>(p.heads), sq = static_cast<int>(p.sq);
    typename Kernel::Arguments args{
        cute::make_tuple(b, h, sq, static_cast<int>(p.skv), static_cast<int>(p.head_dim)),
        {static_cast<const Element*>(p.q), stride_of(p.q_stride), static_cast<const Element*>(p.k),
         stride_of(p.k_stride), static_cast<const Element*>(p.v), stride_of(p.v_stride)},
        {static_cast<Element*>(p.out), stride_of(p.o_stride), lse, StrideLse{cute::_1{}, cute::make_tuple(h * sq, sq)}},
        hardware_};
    return args;
  }

  cutlass::KernelHardwareInfo hardware_;
  typename Kernel::Params params_{};
};

// The kernel of one element type, head dim and schedule for a causal or unmasked problem of `keys` keys
// (make_fused_attention).
template <typename Element, int kHeadDim, AttentionSchedule kSchedule>
std::unique_ptr<FusedAttention> make_fused_attention_of(bool causal, std::int64_t keys, int device, int sm_count) {
  using Whole = CutlassFusedAttention<Element, kHeadDim, KeyMask::kNone, kSchedule>;
  if (causal) {
    return std::make_unique<CutlassFusedAttention<Element, kHeadDim, KeyMask::kCausal, kSchedule>>(device, sm_count);
  }
  if (keys % Whole::kKeyTile != 0) {
    return std::make_unique<CutlassFusedAttention<Element, kHeadDim, KeyMask::kPartialLastTile, kSchedule>>(device,
                                                                                                            sm_count);
  }
  return std::make_unique<Whole>(device, sm_count);
}

// The kernels of one element type and schedule: head dim 64 or 128 (head_dim_64_only: 64), causal or not; nullptr for
// another head dim.
template <typename Element, AttentionSchedule kSchedule>
std::unique_ptr<FusedAttention> make_typed_fused_attention(std::int64_t head_dim, bool causal, std::int64_t keys,
                                                           int device, int sm_count) {
  if (head_dim == 64) return make_fused_attention_of<Element, 64, kSchedule>(causal, keys, device, sm_count);
  if constexpr (!head_dim_64_only(kSchedule)) {
    if (head_dim == 128) return make_fused_attention_of<Element, 128, kSchedule>(causal, keys, device, sm_count);
  }
  return nullptr;
}

// The kernels of each dtype and schedule, in files of their own so that they compile in parallel: f16 cooperative
// (cutlass_attention_sm90.cu, which also dispatches), bf16 cooperative (_bf16.cu), f16 and bf16 ping-pong
// (_pingpong.cu, _pingpong_bf16.cu), f16 and bf16 wide ping-pong (_pingpong_wide.cu, _pingpong_wide_bf16.cu), f16 and
// bf16 tall ping-pong (_pingpong_tall.cu, _pingpong_tall_bf16.cu).
#define TENSORACLE_FUSED_ATTENTION_MAKER(name) \
  std::unique_ptr<FusedAttention> name(std::int64_t head_dim, bool causal, std::int64_t keys, int device, int sm_count)
TENSORACLE_FUSED_ATTENTION_MAKER(make_f16_fused_attention);
TENSORACLE_FUSED_ATTENTION_MAKER(make_bf16_fused_attention);
TENSORACLE_FUSED_ATTENTION_MAKER(make_f16_pingpong_fused_attention);
TENSORACLE_FUSED_ATTENTION_MAKER(make_bf16_pingpong_fused_attention);
TENSORACLE_FUSED_ATTENTION_MAKER(make_f16_pingpong_wide_fused_attention);
TENSORACLE_FUSED_ATTENTION_MAKER(make_bf16_pingpong_wide_fused_attention);
TENSORACLE_FUSED_ATTENTION_MAKER(make_f16_pingpong_tall_fused_attention);
TENSORACLE_FUSED_ATTENTION_MAKER(make_bf16_pingpong_tall_fused_attention);

}  // namespace tensoracle::cuda::sm90
