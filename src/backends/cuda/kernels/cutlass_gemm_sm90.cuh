// The CUTLASS Hopper products behind cutlass_gemm_sm90.hpp: one template over operand and result types, activation,
// scaling and configuration, instantiated by cutlass_gemm_sm90{,_bf16,_fp8,_int8}.cu (compiled for sm_90a only).
#pragma once

// FusedGemm::run launches these kernels programmatically: their producer warps must wait for the preceding kernel.
#if !defined(CUTLASS_ENABLE_GDC_FOR_SM90)
#error "the CUTLASS sm_90 products are compiled with CUTLASS_ENABLE_GDC_FOR_SM90 (src/CMakeLists.txt)"
#endif

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

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>

#include "backends/cuda/kernels/cutlass_gemm_sm90.hpp"
#include "backends/cuda/kernels/cutlass_sm90_shared_memory.cuh"
#include "backends/cuda/kernels/gelu_erf_fast.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle::cuda::sm90 {

// One configuration: tile (its K extent is 128 bytes of operands), cluster, kernel and epilogue schedules.
template <int kM, int kN, int kK, int kClusterM, class KernelSchedule_, class EpilogueSchedule_,
          class EpilogueTile_ = cutlass::epilogue::collective::EpilogueTileAuto, int kClusterN = 1>
struct Config {
  using Tile = cute::Shape<cute::Int<kM>, cute::Int<kN>, cute::Int<kK>>;
  using Cluster = cute::Shape<cute::Int<kClusterM>, cute::Int<kClusterN>, cute::_1>;
  using KernelSchedule = KernelSchedule_;
  using EpilogueSchedule = EpilogueSchedule_;
  using EpilogueTile = EpilogueTile_;
};

// The configurations of GemmConfig, for operands of kBits bits.
template <GemmConfig kConfig, int kBits>
struct ConfigTraits;
template <int kBits>
struct ConfigTraits<GemmConfig::kCooperative128x256, kBits>
    : Config<128, 256, 1024 / kBits, 2, cutlass::gemm::KernelTmaWarpSpecializedCooperative,
             cutlass::epilogue::TmaWarpSpecializedCooperative> {};
template <int kBits>
struct ConfigTraits<GemmConfig::kCooperative256x128, kBits>
    : Config<256, 128, 1024 / kBits, 1, cutlass::gemm::KernelTmaWarpSpecializedCooperative,
             cutlass::epilogue::TmaWarpSpecializedCooperative, cutlass::epilogue::collective::EpilogueTileAuto, 2> {};
template <int kBits>
struct ConfigTraits<GemmConfig::kCooperative128x128, kBits>
    : Config<128, 128, 1024 / kBits, 1, cutlass::gemm::KernelTmaWarpSpecializedCooperative,
             cutlass::epilogue::TmaWarpSpecializedCooperative> {};
template <int kBits>
struct ConfigTraits<GemmConfig::kCooperative128x192, kBits>
    : Config<128, 192, 1024 / kBits, 2, cutlass::gemm::KernelTmaWarpSpecializedCooperative,
             cutlass::epilogue::TmaWarpSpecializedCooperative> {};
template <int kBits>
struct ConfigTraits<GemmConfig::kPingpong128x128, kBits>
    : Config<128, 128, 1024 / kBits, 1, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
             cutlass::epilogue::TmaWarpSpecialized> {};
template <int kBits>
struct ConfigTraits<GemmConfig::kPingpong128x128Epi64, kBits>
    : Config<128, 128, 1024 / kBits, 1, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
             cutlass::epilogue::TmaWarpSpecialized, cute::Shape<cute::_64, cute::_64>> {};
template <int kBits>
struct ConfigTraits<GemmConfig::kPingpong64x128, kBits>
    : Config<64, 128, 1024 / kBits, 1, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
             cutlass::epilogue::TmaWarpSpecialized> {};
template <int kBits>
struct ConfigTraits<GemmConfig::kPingpong64x64, kBits>
    : Config<64, 64, 1024 / kBits, 1, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
             cutlass::epilogue::TmaWarpSpecialized> {};

// value · (1 / scale) for a fragment of values and the fragment of one broadcast scale: one reciprocal (rounded to
// nearest) per fragment, one multiplication per value, where a division per value costs several instructions.
template <class T>
struct MultiplyByReciprocal;
template <int N>
struct MultiplyByReciprocal<cutlass::Array<float, N>> {
  CUTLASS_DEVICE cutlass::Array<float, N> operator()(const cutlass::Array<float, N>& value,
                                                     const cutlass::Array<float, N>& scale) const {
    const float reciprocal = __frcp_rn(scale[0]);
    cutlass::Array<float, N> out;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) out[i] = value[i] * reciprocal;
    return out;
  }
};

// The erf-GELU of a result quantized next (gelu_erf_fast.hpp: one exp2 and one reciprocal a value, |error| <= 5e-6),
// for the epilogue's fragments; the float results take GeluErfFloat below.
template <class T>
struct GeluErfQuantized {
  CUTLASS_HOST_DEVICE float operator()(float value) const { return kernels::gelu_erf_fast(value); }
};
template <int N>
struct GeluErfQuantized<cutlass::Array<float, N>> {
  CUTLASS_DEVICE cutlass::Array<float, N> operator()(const cutlass::Array<float, N>& value) const {
    cutlass::Array<float, N> out;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) out[i] = kernels::gelu_erf_fast(value[i]);
    return out;
  }
};

// The erf-GELU of a float (f16/bf16) result (gelu_erf_fast.hpp: gelu_erf_erfc, as accurate as erff's form at about
// half its cost; the epilogue's arithmetic is a large part of a short-K product's time).
template <class T>
struct GeluErfFloat {
  CUTLASS_HOST_DEVICE float operator()(float value) const { return kernels::gelu_erf_erfc(value); }
};
template <int N>
struct GeluErfFloat<cutlass::Array<float, N>> {
  CUTLASS_DEVICE cutlass::Array<float, N> operator()(const cutlass::Array<float, N>& value) const {
    cutlass::Array<float, N> out;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) out[i] = kernels::gelu_erf_erfc(value[i]);
    return out;
  }
};

// The quantized result's epilogue as a visitor tree: activation(alpha[n] · acc + bias[n] + beta · C) in f32 (as
// PerColLinCombPerColBiasEltAct), multiplied by the reciprocal of one output scale read from device memory, converted
// to ElementD (i8: half to even, saturating; e4m3: to nearest, saturating). The bias is ElementEpi, C ElementC (a
// quantized residual, beta then its scale read from device memory).
template <template <class> class ActivationFn, class ElementD, class ElementEpi, class ElementC, class Tile>
using QuantizedOutputCallbacks = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<MultiplyByReciprocal, ElementD, float,
                                           cutlass::FloatRoundStyle::round_to_nearest>,
    cutlass::epilogue::fusion::Sm90EVT<
        cutlass::epilogue::fusion::Sm90Compute<ActivationFn, float, float, cutlass::FloatRoundStyle::round_to_nearest>,
        cutlass::epilogue::fusion::Sm90PerColLinCombPerColBias<0, Tile, void, float, float, ElementEpi, ElementC,
                                                               float>>,
    cutlass::epilogue::fusion::Sm90ScalarBroadcast<float>>;

// Without C (a product with no residual, whose kernel then reserves no shared memory for C and has the more for its
// operands' stages): activation(alpha[n] · acc + bias[n]) as ElementAct; for a quantized result that value (in f32)
// times the reciprocal of the output scale, converted to ElementD.
template <template <class> class ActivationFn, class ElementAct, class ElementEpi, class Tile>
using ScaledNoCCallbacks = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<ActivationFn, ElementAct, float, cutlass::FloatRoundStyle::round_to_nearest>,
    cutlass::epilogue::fusion::Sm90EVT<
        cutlass::epilogue::fusion::Sm90Compute<cutlass::homogeneous_multiply_add, float, float,
                                               cutlass::FloatRoundStyle::round_to_nearest>,
        cutlass::epilogue::fusion::Sm90RowBroadcast<0, Tile, float, float, cute::Stride<cute::_0, bool, int64_t>, 4>,
        cutlass::epilogue::fusion::Sm90AccFetch,
        cutlass::epilogue::fusion::Sm90RowBroadcast<0, Tile, ElementEpi, float,
                                                    cute::Stride<cute::_0, cute::_1, int64_t>,
                                                    128 / cutlass::sizeof_bits_v<ElementEpi>>>>;
// Without C and unscaled (a float product with no residual): activation(acc + bias[n]) as ElementAct.
template <template <class> class ActivationFn, class ElementAct, class ElementEpi, class Tile>
using NoCCallbacks = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<ActivationFn, ElementAct, float, cutlass::FloatRoundStyle::round_to_nearest>,
    cutlass::epilogue::fusion::Sm90EVT<
        cutlass::epilogue::fusion::Sm90Compute<cutlass::plus, float, float, cutlass::FloatRoundStyle::round_to_nearest>,
        cutlass::epilogue::fusion::Sm90AccFetch,
        cutlass::epilogue::fusion::Sm90RowBroadcast<0, Tile, ElementEpi, float,
                                                    cute::Stride<cute::_0, cute::_1, int64_t>,
                                                    128 / cutlass::sizeof_bits_v<ElementEpi>>>>;
template <template <class> class ActivationFn, class ElementD, class ElementEpi, class Tile>
using QuantizedOutputNoCCallbacks = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<MultiplyByReciprocal, ElementD, float,
                                           cutlass::FloatRoundStyle::round_to_nearest>,
    ScaledNoCCallbacks<ActivationFn, float, ElementEpi, Tile>, cutlass::epilogue::fusion::Sm90ScalarBroadcast<float>>;

// A and B are K-major (A row-major [m, k]; B, the weight [n, k], column-major [k, n]); C and D row-major. The epilogue
// is activation(beta · C + (alpha · acc + bias[n])) in f32 (beta 1 with a residual C, else 0; alpha 1, or scale[n]
// when kScaled), D rounded once to ElementOut; or, with an ElementD other than ElementOut (the quantized products'
// quantized result), that value divided by the output scale and converted to ElementD, bias and C staying ElementOut
// unless ElementC says otherwise (a quantized residual C, scaled by *c_scale; void: no C, and no shared memory held
// for it, which leaves the operands more stages).
// i8 operands accumulate in i32 (exact), the others in f32.
template <typename ElementIn, typename ElementOut, template <class> class ActivationFn, bool kScaled,
          GemmConfig kConfig, typename ElementD = ElementOut, typename ElementC = ElementOut>
class CutlassFusedGemm final : public FusedGemm {
  static constexpr int kInBits = cutlass::sizeof_bits<ElementIn>::value;
  static constexpr bool kQuantizedOut = !std::is_same_v<ElementD, ElementOut>;
  static constexpr bool kNoC = std::is_void_v<ElementC>;
  static constexpr bool kQuantizedC = !kNoC && !std::is_same_v<ElementC, ElementOut>;
  static_assert(!kQuantizedOut || kScaled, "a quantized result comes from a quantized (scaled) product");
  static_assert(!kQuantizedC || kQuantizedOut, "a quantized residual comes with a quantized result");
  using Traits = ConfigTraits<kConfig, kInBits>;
  using Accumulator = std::conditional_t<std::is_same_v<ElementIn, std::int8_t>, std::int32_t, float>;
  static constexpr int kInAlignment = 128 / kInBits;  // elements in 16 bytes
  static constexpr int kDAlignment = 128 / cutlass::sizeof_bits<ElementD>::value;
  // Without C, CUTLASS takes C's alignment as D's.
  static constexpr int kCAlignment = 128 / cutlass::sizeof_bits<std::conditional_t<kNoC, ElementD, ElementC>>::value;
  using FusionOp = std::conditional_t<
      kNoC,
      std::conditional_t<
          kQuantizedOut, QuantizedOutputNoCCallbacks<ActivationFn, ElementD, ElementOut, typename Traits::Tile>,
          std::conditional_t<kScaled, ScaledNoCCallbacks<ActivationFn, ElementOut, ElementOut, typename Traits::Tile>,
                             NoCCallbacks<ActivationFn, ElementOut, ElementOut, typename Traits::Tile>>>,
      std::conditional_t<
          kQuantizedOut,
          QuantizedOutputCallbacks<ActivationFn, ElementD, ElementOut, std::conditional_t<kNoC, ElementOut, ElementC>,
                                   typename Traits::Tile>,
          std::conditional_t<kScaled,
                             cutlass::epilogue::fusion::PerColLinCombPerColBiasEltAct<ActivationFn, ElementOut, float,
                                                                                      ElementOut, ElementOut, float>,
                             cutlass::epilogue::fusion::LinCombPerColBiasEltAct<ActivationFn, ElementOut, float,
                                                                                ElementOut, ElementOut, float>>>>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Traits::Tile, typename Traits::Cluster,
      typename Traits::EpilogueTile, Accumulator, float, ElementC, cutlass::layout::RowMajor, kCAlignment, ElementD,
      cutlass::layout::RowMajor, kDAlignment, typename Traits::EpilogueSchedule, FusionOp>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementIn, cutlass::layout::RowMajor, kInAlignment,
      ElementIn, cutlass::layout::ColumnMajor, kInAlignment, Accumulator, typename Traits::Tile,
      typename Traits::Cluster,
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
    allow_shared_storage<Kernel>("a CUTLASS sm_90 product");
  }

  bool can_implement(const GemmProblem& p) const override {
    constexpr auto kMax = std::numeric_limits<int>::max();
    if (p.m <= 0 || p.n <= 0 || p.k <= 0 || p.m > kMax || p.n > kMax || p.k > kMax) return false;
    if (p.k % kInAlignment != 0 || p.n % kCAlignment != 0 || p.n % kDAlignment != 0) return false;
    if ((kScaled && p.scale == nullptr) || (kQuantizedOut && p.output_scale == nullptr)) return false;
    if (p.c != nullptr && (kNoC || kQuantizedC != (p.c_scale != nullptr))) return false;
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

  void run(cudaStream_t stream, bool programmatic, const char* context) override {
    const cutlass::Status status = adapter_.run(stream, nullptr, programmatic);
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
        {static_cast<const ElementIn*>(p.a), make_cute_packed_stride(typename Kernel::StrideA{}, {m, k, 1}),
         static_cast<const ElementIn*>(p.b), make_cute_packed_stride(typename Kernel::StrideB{}, {n, k, 1})},
        {{},
         // Without a residual C is not read (beta 0, or no C at all); D stands in for its address.
         static_cast<const ElementC*>(kNoC ? nullptr : (p.c != nullptr ? p.c : p.d)),
         make_cute_packed_stride(typename Kernel::StrideC{}, {m, n, 1}),
         static_cast<ElementD*>(p.d),
         make_cute_packed_stride(typename Kernel::StrideD{}, {m, n, 1})},
        hardware_};
    using RowStride = cute::Stride<cute::_0, bool, std::int64_t>;
    if constexpr (kNoC && !kScaled) {
      // activation(acc + bias[n]): the tree's arguments, each node's children first.
      args.epilogue.thread.op_0.op_1.ptr_row = static_cast<const ElementOut*>(p.bias);
    } else if constexpr (kNoC) {
      // The tree's arguments, each node's children first (op_0, op_1, ...): [(1 / output scale) ·] activation(alpha[n]
      // · acc + bias[n]).
      const auto set_activation = [&](auto& activation) {
        activation.op_0.op_0 = {p.scale, 0.0F, RowStride{cute::_0{}, true, 0}};  // alpha, a vector along n
        activation.op_0.op_2.ptr_row = static_cast<const ElementOut*>(p.bias);
      };
      if constexpr (kQuantizedOut) {
        set_activation(args.epilogue.thread.op_0);
        args.epilogue.thread.op_1.scalar_ptrs[0] = p.output_scale;
      } else {
        set_activation(args.epilogue.thread);
      }
    } else if constexpr (kQuantizedOut) {
      // The tree's arguments, each node's children first (op_0, op_1, ...) and the node's own last:
      // activation(beta[n] · C + (alpha[n] · acc + bias[n])) · (1 / output scale).
      auto& divide = args.epilogue.thread;
      auto& lincomb = divide.op_0.op_0;
      // beta, a scalar: 1, 0 without a residual, or a quantized residual's scale read from device memory.
      lincomb.op_0 = {p.c != nullptr ? p.c_scale : nullptr, p.c != nullptr ? 1.0F : 0.0F,
                      RowStride{cute::_0{}, false, 0}};
      lincomb.op_2.op_0 = {p.scale, 0.0F, RowStride{cute::_0{}, true, 0}};  // alpha, a vector along n
      lincomb.op_2.op_2.ptr_row = static_cast<const ElementOut*>(p.bias);
      divide.op_1.scalar_ptrs[0] = p.output_scale;
    } else {
      args.epilogue.thread.alpha = 1.0F;
      if constexpr (kScaled) args.epilogue.thread.alpha_ptr = p.scale;  // a vector along n (the default stride)
      args.epilogue.thread.beta = p.c != nullptr ? 1.0F : 0.0F;
      args.epilogue.thread.bias_ptr = static_cast<const ElementOut*>(p.bias);
    }
    return args;
  }

  cutlass::KernelHardwareInfo hardware_;
  Adapter adapter_;
};

// The product of `config` among the configurations of kBuilt, each Product<kBuilt> (a CutlassFusedGemm of that
// configuration); nullptr for another configuration.
template <template <GemmConfig> class Product, GemmConfig... kBuilt>
std::unique_ptr<FusedGemm> make_built_gemm(GemmConfig config, int device, int sm_count) {
  std::unique_ptr<FusedGemm> gemm;
  ((config == kBuilt ? (gemm = std::make_unique<Product<kBuilt>>(device, sm_count), 0) : 0), ...);
  return gemm;
}

// linear's product of `config` for one element type (operands and result) and activation (GeluErfFloat, or
// cutlass::epilogue::thread::Identity): with a residual C (ElementC = Element), or without C (void: no shared memory
// held for C's stages); the configurations of kBuilt only (nullptr for another).
template <typename Element, typename ElementC, template <class> class ActivationFn>
struct FusedProduct {
  template <GemmConfig kConfig>
  using Of = CutlassFusedGemm<Element, Element, ActivationFn, false, kConfig, Element, ElementC>;
};
template <typename Element, typename ElementC, template <class> class ActivationFn, GemmConfig... kBuilt>
std::unique_ptr<FusedGemm> make_typed_fused_gemm(GemmConfig config, int device, int sm_count) {
  return make_built_gemm<FusedProduct<Element, ElementC, ActivationFn>::template Of, kBuilt...>(config, device,
                                                                                                sm_count);
}

// The same with a residual C (ElementC = Element) when `residual`, else without C (void).
template <typename Element, template <class> class ActivationFn, GemmConfig... kBuilt>
std::unique_ptr<FusedGemm> make_typed_fused_gemm(GemmConfig config, bool residual, int device, int sm_count) {
  if (residual) return make_typed_fused_gemm<Element, Element, ActivationFn, kBuilt...>(config, device, sm_count);
  return make_typed_fused_gemm<Element, void, ActivationFn, kBuilt...>(config, device, sm_count);
}

// The 128-row configurations of one element type with erf-GELU, with a residual C (ElementC = Element) or without C
// (void).
template <typename Element, typename ElementC>
std::unique_ptr<FusedGemm> make_large_tile_gelu_gemm(GemmConfig config, int device, int sm_count) {
  return make_typed_fused_gemm<Element, ElementC, GeluErfFloat, GemmConfig::kCooperative128x256,
                               GemmConfig::kCooperative256x128, GemmConfig::kCooperative128x128,
                               GemmConfig::kPingpong128x128, GemmConfig::kPingpong128x128Epi64>(config, device,
                                                                                                sm_count);
}

// The small-tile configurations (GemmConfig's kPingpong64x128 and kPingpong64x64) of one element type, with erf-GELU
// or no activation, with a residual C or without C; nullptr for another activation or configuration.
template <typename Element>
std::unique_ptr<FusedGemm> make_typed_small_tile_gemm(GemmConfig config, Activation activation, bool residual,
                                                      int device, int sm_count) {
  constexpr GemmConfig k64x128 = GemmConfig::kPingpong64x128, k64x64 = GemmConfig::kPingpong64x64;
  using cutlass::epilogue::thread::Identity;
  switch (activation) {
    case Activation::kGeluErf:
      return make_typed_fused_gemm<Element, GeluErfFloat, k64x128, k64x64>(config, residual, device, sm_count);
    case Activation::kNone:
      return make_typed_fused_gemm<Element, Identity, k64x128, k64x64>(config, residual, device, sm_count);
    default: return nullptr;
  }
}

// The plain products (no activation) of one element type with 128-row tiles, with a residual C or without C; nullptr
// for another configuration. The 128x128 ping-pong tile: its epilogue overlaps the other warpgroup's products, for
// products with few tiles across (ViT's and BERT-large's attention output projections: 768 or 1024 columns). The
// 128x192 cooperative tile: 768 or 2304 columns are whole tiles of it, and 4096 rows by 768 columns (BERT-base b32's
// and GPT-2 b8's attention output and second MLP products) make 128 tiles, one wave on 132 multiprocessors, where
// 128x128 tiles make 192 (a second wave of 60) and 128x256 tiles 96.
template <typename Element>
std::unique_ptr<FusedGemm> make_typed_plain_gemm(GemmConfig config, bool residual, int device, int sm_count) {
  return make_typed_fused_gemm<Element, cutlass::epilogue::thread::Identity, GemmConfig::kPingpong128x128,
                               GemmConfig::kCooperative128x192>(config, residual, device, sm_count);
}

// quantized_linear's product of `config` for one operand type, f16 result: the configurations of kBuilt only. i8
// (i32 accumulators) takes 128x256 cooperative and 128x128 ping-pong tiles; f8e4m3 keeps a second f32 accumulator that
// the products are promoted into every K tile (CUTLASS's exact FP8 mainloop, not its fast accumulation), which fits a
// thread's registers with 64 rows per warpgroup: 128x128 and 128x256 cooperative tiles.
// ElementD: f16 (half_t), or ElementIn for a result quantized again.
// ElementC: f16 (a residual C may be given), or void (none may: the kernel holds no shared memory for C).
template <typename ElementIn, typename ElementD, typename ElementC, template <class> class ActivationFn>
struct QuantizedProduct {
  template <GemmConfig kConfig>
  using Of = CutlassFusedGemm<ElementIn, cutlass::half_t, ActivationFn, true, kConfig, ElementD, ElementC>;
};
template <typename ElementIn, typename ElementD, typename ElementC, template <class> class ActivationFn,
          GemmConfig... kBuilt>
std::unique_ptr<FusedGemm> make_typed_quantized_gemm(GemmConfig config, int device, int sm_count) {
  return make_built_gemm<QuantizedProduct<ElementIn, ElementD, ElementC, ActivationFn>::template Of, kBuilt...>(
      config, device, sm_count);
}

template <typename ElementIn, typename ElementD, typename ElementC, GemmConfig... kBuilt>
std::unique_ptr<FusedGemm> make_typed_quantized_gemm(GemmConfig config, Activation activation, int device,
                                                     int sm_count) {
  if (activation == Activation::kGeluErf) {
    if constexpr (!std::is_same_v<ElementD, cutlass::half_t>) {  // a result quantized next
      return make_typed_quantized_gemm<ElementIn, ElementD, ElementC, GeluErfQuantized, kBuilt...>(config, device,
                                                                                                   sm_count);
    } else {
      return make_typed_quantized_gemm<ElementIn, ElementD, ElementC, GeluErfFloat, kBuilt...>(config, device,
                                                                                               sm_count);
    }
  }
  if (activation != Activation::kNone) return nullptr;  // relu: built for the quantized residual products only
  return make_typed_quantized_gemm<ElementIn, ElementD, ElementC, cutlass::epilogue::thread::Identity, kBuilt...>(
      config, device, sm_count);
}

// The same with an f16 residual C when `residual`, else without C (no shared memory held for C's stages).
template <typename ElementIn, typename ElementD, GemmConfig... kBuilt>
std::unique_ptr<FusedGemm> make_typed_quantized_gemm(GemmConfig config, Activation activation, bool residual,
                                                     int device, int sm_count) {
  if (residual) {
    return make_typed_quantized_gemm<ElementIn, ElementD, cutlass::half_t, kBuilt...>(config, activation, device,
                                                                                      sm_count);
  }
  return make_typed_quantized_gemm<ElementIn, ElementD, void, kBuilt...>(config, activation, device, sm_count);
}

// quantized_conv's 1x1 product of `config`: ElementIn operands and D, f16 bias, ElementC residual (ElementIn: scaled
// by its own scale; f16; void: none), relu; the configurations of kBuilt only.
template <typename ElementIn, typename ElementC, GemmConfig... kBuilt>
std::unique_ptr<FusedGemm> make_typed_quantized_residual_gemm(GemmConfig config, int device, int sm_count) {
  return make_built_gemm<QuantizedProduct<ElementIn, ElementIn, ElementC, cutlass::epilogue::thread::ReLu>::template Of,
                         kBuilt...>(config, device, sm_count);
}

// linear's erf-GELU products of the 128-row configurations with a residual C, and without C (_no_c): f16
// (cutlass_gemm_sm90.cu, ..._no_c.cu), bf16 (..._bf16.cu, ..._bf16_no_c.cu), files of their own so that the
// instantiations compile in parallel.
std::unique_ptr<FusedGemm> make_f16_fused_gemm(GemmConfig config, int device, int sm_count);
std::unique_ptr<FusedGemm> make_bf16_fused_gemm(GemmConfig config, int device, int sm_count);
std::unique_ptr<FusedGemm> make_f16_fused_gemm_no_c(GemmConfig config, int device, int sm_count);
std::unique_ptr<FusedGemm> make_bf16_fused_gemm_no_c(GemmConfig config, int device, int sm_count);
// linear's small-tile products (make_typed_small_tile_gemm): f16 (..._small_tiles.cu), bf16 (..._bf16_small_tiles.cu).
std::unique_ptr<FusedGemm> make_f16_small_tile_gemm(GemmConfig config, Activation activation, bool residual, int device,
                                                    int sm_count);
std::unique_ptr<FusedGemm> make_bf16_small_tile_gemm(GemmConfig config, Activation activation, bool residual,
                                                     int device, int sm_count);
// linear's plain 128-row products (make_typed_plain_gemm): f16 (..._plain.cu), bf16 (..._bf16_plain.cu).
std::unique_ptr<FusedGemm> make_f16_plain_gemm(GemmConfig config, bool residual, int device, int sm_count);
std::unique_ptr<FusedGemm> make_bf16_plain_gemm(GemmConfig config, bool residual, int device, int sm_count);
// The quantized products, f16 result (..._fp8.cu, ..._int8.cu) and result quantized again (..._requantized.cu).
std::unique_ptr<FusedGemm> make_f8e4m3_quantized_gemm(GemmConfig config, Activation activation, int device,
                                                      int sm_count);
std::unique_ptr<FusedGemm> make_f8e4m3_requantized_gemm(GemmConfig config, Activation activation, int device,
                                                        int sm_count);
std::unique_ptr<FusedGemm> make_i8_quantized_gemm(GemmConfig config, Activation activation, bool residual, int device,
                                                  int sm_count);
// The i8 ones without C when `residual` is false.
std::unique_ptr<FusedGemm> make_i8_requantized_gemm(GemmConfig config, Activation activation, bool residual, int device,
                                                    int sm_count);
// ..._int8_residual.cu: an i8 residual (scaled), an f16 one, or none.
std::unique_ptr<FusedGemm> make_i8_residual_gemm(GemmConfig config, ResidualC residual, int device, int sm_count);

}  // namespace tensoracle::cuda::sm90
