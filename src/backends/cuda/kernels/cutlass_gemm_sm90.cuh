// The CUTLASS Hopper products behind cutlass_gemm_sm90.hpp: one template over element type and configuration,
// instantiated by cutlass_gemm_sm90_{f16,bf16}.cu (compiled for sm_90a only).
#pragma once

#include <cutlass/cutlass.h>
#include <cutlass/epilogue/thread/activation.h>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/kernel_hardware_info.h>
#include <cute/tensor.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/operations.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>

#include <fmt/format.h>

#include <limits>
#include <memory>
#include <string>

#include "backends/cuda/kernels/cutlass_gemm_sm90.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle::cuda::sm90 {

// One configuration: tile, cluster, kernel and epilogue schedules.
template <int kM, int kN, int kClusterM, class KernelSchedule_, class EpilogueSchedule_>
struct Config {
  using Tile = cute::Shape<cute::Int<kM>, cute::Int<kN>, cute::_64>;
  using Cluster = cute::Shape<cute::Int<kClusterM>, cute::_1, cute::_1>;
  using KernelSchedule = KernelSchedule_;
  using EpilogueSchedule = EpilogueSchedule_;
};

// The three configurations of GemmConfig.
template <GemmConfig kConfig>
struct ConfigTraits;
template <>
struct ConfigTraits<GemmConfig::kCooperative128x256>
    : Config<128, 256, 2, cutlass::gemm::KernelTmaWarpSpecializedCooperative,
             cutlass::epilogue::TmaWarpSpecializedCooperative> {};
template <>
struct ConfigTraits<GemmConfig::kCooperative128x128>
    : Config<128, 128, 1, cutlass::gemm::KernelTmaWarpSpecializedCooperative,
             cutlass::epilogue::TmaWarpSpecializedCooperative> {};
template <>
struct ConfigTraits<GemmConfig::kPingpong128x128>
    : Config<128, 128, 1, cutlass::gemm::KernelTmaWarpSpecializedPingpong, cutlass::epilogue::TmaWarpSpecialized> {};

// A and B are K-major (A row-major [m, k]; B, the weight [n, k], column-major [k, n]); C and D row-major. The epilogue
// is activation(beta · C + (alpha · acc + bias[n])) in f32 (alpha 1; beta 1 with a residual C, else 0), D rounded once.
template <typename Element, GemmConfig kConfig>
class CutlassFusedGemm final : public FusedGemm {
  using Traits = ConfigTraits<kConfig>;
  static constexpr int kAlignment = 128 / cutlass::sizeof_bits<Element>::value;  // elements in 16 bytes
  using FusionOp = cutlass::epilogue::fusion::LinCombPerColBiasEltAct<cutlass::epilogue::thread::GELU, Element, float,
                                                                      Element, Element, float>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Traits::Tile, typename Traits::Cluster,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, Element, cutlass::layout::RowMajor, kAlignment,
      Element, cutlass::layout::RowMajor, kAlignment, typename Traits::EpilogueSchedule, FusionOp>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, cutlass::layout::RowMajor, kAlignment, Element,
      cutlass::layout::ColumnMajor, kAlignment, float, typename Traits::Tile, typename Traits::Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      typename Traits::KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      cutlass::gemm::PersistentScheduler>;
  using Adapter = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

 public:
  // Raises the kernel's shared-memory limit on the current device (host work, once per plan's owner).
  CutlassFusedGemm(int device, int sm_count) {
    hardware_.device_id = device;
    hardware_.sm_count = sm_count;
    constexpr int kSharedBytes = Kernel::SharedStorageSize;
    if (kSharedBytes >= (48 << 10)) {
      const cudaError_t status = cudaFuncSetAttribute(cutlass::device_kernel<Kernel>,
                                                      cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes);
      if (status != cudaSuccess) {
        cudaGetLastError();
        throw CudaError(fmt::format("cudaFuncSetAttribute({} bytes of shared memory) for a CUTLASS sm_90 product: {}",
                                    kSharedBytes, cudaGetErrorString(status)));
      }
    }
  }

  bool can_implement(const GemmProblem& p) const override {
    constexpr auto kMax = std::numeric_limits<int>::max();
    if (p.m <= 0 || p.n <= 0 || p.k <= 0 || p.m > kMax || p.n > kMax || p.k > kMax) return false;
    if (p.k % kAlignment != 0 || p.n % kAlignment != 0) return false;
    return Adapter::can_implement(arguments(p)) == cutlass::Status::kSuccess;
  }

  std::size_t workspace_bytes(const GemmProblem& p) const override { return Adapter::get_workspace_size(arguments(p)); }

  void plan(const GemmProblem& p, void* workspace, const char* context) override {
    // The persistent tile scheduler's scratch needs no initialization, so update() (the parameters and the bulk copy
    // descriptors, on the host) is all a plan takes.
    const cutlass::Status status = adapter_.update(arguments(p), workspace);
    if (status != cutlass::Status::kSuccess) {
      throw CudaError(fmt::format("{}: CUTLASS could not plan the sm_90 product ({}x{}x{}): {}", context, p.m, p.n, p.k,
                                  cutlassGetStatusString(status)));
    }
  }

  void run(cudaStream_t stream, const char* context) override {
    const cutlass::Status status = adapter_.run(stream);
    if (status != cutlass::Status::kSuccess) {
      const cudaError_t error = cudaGetLastError();
      throw CudaError(fmt::format("{}: the CUTLASS sm_90 product did not launch: {} ({})", context,
                                  cutlassGetStatusString(status), cudaGetErrorString(error)));
    }
  }

 private:
  typename Adapter::Arguments arguments(const GemmProblem& p) const {
    const int m = static_cast<int>(p.m), n = static_cast<int>(p.n), k = static_cast<int>(p.k);
    using cutlass::make_cute_packed_stride;
    typename Adapter::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {m, n, k, 1},
        {static_cast<const Element*>(p.a), make_cute_packed_stride(typename Kernel::StrideA{}, {m, k, 1}),
         static_cast<const Element*>(p.b), make_cute_packed_stride(typename Kernel::StrideB{}, {n, k, 1})},
        {{},
         // Without a residual C is not read (beta 0); D stands in for its address.
         static_cast<const Element*>(p.c != nullptr ? p.c : p.d),
         make_cute_packed_stride(typename Kernel::StrideC{}, {m, n, 1}),
         static_cast<Element*>(p.d),
         make_cute_packed_stride(typename Kernel::StrideD{}, {m, n, 1})},
        hardware_};
    args.epilogue.thread.alpha = 1.0F;
    args.epilogue.thread.beta = p.c != nullptr ? 1.0F : 0.0F;
    args.epilogue.thread.bias_ptr = static_cast<const Element*>(p.bias);
    return args;
  }

  cutlass::KernelHardwareInfo hardware_;
  Adapter adapter_;
};

// The product of `config` for one element type.
template <typename Element>
std::unique_ptr<FusedGemm> make_typed_fused_gemm(GemmConfig config, int device, int sm_count) {
  switch (config) {
    case GemmConfig::kCooperative128x256:
      return std::make_unique<CutlassFusedGemm<Element, GemmConfig::kCooperative128x256>>(device, sm_count);
    case GemmConfig::kCooperative128x128:
      return std::make_unique<CutlassFusedGemm<Element, GemmConfig::kCooperative128x128>>(device, sm_count);
    case GemmConfig::kPingpong128x128:
      return std::make_unique<CutlassFusedGemm<Element, GemmConfig::kPingpong128x128>>(device, sm_count);
  }
  return nullptr;
}

std::unique_ptr<FusedGemm> make_f16_fused_gemm(GemmConfig config, int device, int sm_count);   // ..._f16.cu
std::unique_ptr<FusedGemm> make_bf16_fused_gemm(GemmConfig config, int device, int sm_count);  // ..._bf16.cu

}  // namespace tensoracle::cuda::sm90
