// CUDA kernels of resize (PyTorch's interpolate: nearest, bilinear).
//
// Semantics follow the CPU reference kernels (src/backends/cpu/kernels/convolution.cpp): bilinear weights and the
// interpolation compute in f64 as the reference does, then round once through f32 to the output dtype.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "backends/cuda/cuda_step.hpp"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/cudnn_util.hpp"

namespace tensoracle::cuda {
namespace {

using conv_family::all_dtype;
using conv_family::load;
using conv_family::store;
using conv_family::store_from_double;
using kernels::dispatch_float;
using kernels::grid_for;
using kernels::kMaxIndex32;
using kernels::kThreads;
using kernels::launch_kernel;
using kernels::wait_for_preceding_steps;

// ---- resize (PyTorch interpolate), as the CPU reference computes source indices and weights ----

struct ResizeShape {
  std::int64_t planes = 1, h = 1, w = 1, oh = 1, ow = 1;
  bool align_corners = false;
  double scale_h = 0.0, scale_w = 0.0;  // bilinear: as the reference computes them (IEEE division, here on the host)
};

// align_corners: (in - 1) / (out - 1), 0 for a single output; half-pixel centers: in / out.
double bilinear_scale(std::int64_t in, std::int64_t out, bool align_corners) {
  if (align_corners) return out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;
  return static_cast<double>(in) / static_cast<double>(out);
}

// 'nearest' (PyTorch's legacy, asymmetric one): floor(dst · in / out), exactly, without overflow (in = q·out + r).
template <typename I>
__device__ __forceinline__ I nearest_source(I dst, I in, I out) {
  return dst * (in / out) + dst * (in % out) / out;
}

template <typename I>
struct LinearTap {
  I i0, i1;
  double lambda;
};

// source = scale · dst (align_corners) or max(scale · (dst + 0.5) - 0.5, 0) (half-pixel centers) in f64, then the
// floor and the next index clamped to the input. The _rn intrinsics keep every operation rounded on its own (no fused
// multiply-add), as the reference computes it.
template <typename I>
__device__ __forceinline__ LinearTap<I> bilinear_source(I dst, I in, double scale, bool align_corners) {
  double src = 0.0;
  if (align_corners) {
    src = __dmul_rn(scale, static_cast<double>(dst));
  } else {
    src = fmax(__dadd_rn(__dmul_rn(scale, __dadd_rn(static_cast<double>(dst), 0.5)), -0.5), 0.0);
  }
  LinearTap<I> tap;
  tap.i0 = static_cast<I>(src);
  tap.i1 = tap.i0 < in - 1 ? tap.i0 + 1 : tap.i0;
  tap.lambda = fmin(fmax(__dsub_rn(src, static_cast<double>(tap.i0)), 0.0), 1.0);
  return tap;
}

template <typename T, typename I, bool kBilinear>
__global__ void resize_kernel(const T* __restrict__ x, T* __restrict__ y, ResizeShape s) {
  wait_for_preceding_steps();
  const I total = static_cast<I>(s.planes * s.oh * s.ow);
  const I h = static_cast<I>(s.h), w = static_cast<I>(s.w), oh = static_cast<I>(s.oh), ow = static_cast<I>(s.ow);
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); i < total;
       i += static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x)) {
    const I ox = i % ow;
    const I t = i / ow;
    const I oy = t % oh;
    const I p = t / oh;
    const T* xp = x + p * h * w;
    if constexpr (!kBilinear) {
      store(y, i, load(xp, nearest_source<I>(oy, h, oh) * w + nearest_source<I>(ox, w, ow)));
    } else {
      const LinearTap<I> th = bilinear_source<I>(oy, h, s.scale_h, s.align_corners);
      const LinearTap<I> tw = bilinear_source<I>(ox, w, s.scale_w, s.align_corners);
      auto value = [&](I ih, I iw) { return static_cast<double>(load(xp, ih * w + iw)); };
      const double lw = __dsub_rn(1.0, tw.lambda), lh = __dsub_rn(1.0, th.lambda);
      const double top = __dadd_rn(__dmul_rn(lw, value(th.i0, tw.i0)), __dmul_rn(tw.lambda, value(th.i0, tw.i1)));
      const double bottom = __dadd_rn(__dmul_rn(lw, value(th.i1, tw.i0)), __dmul_rn(tw.lambda, value(th.i1, tw.i1)));
      store_from_double(y, i, __dadd_rn(__dmul_rn(lh, top), __dmul_rn(th.lambda, bottom)));
    }
  }
}

// The plan: the geometry and the kernel of the dtype, mode and index width.
struct ResizePlan {
  ResizeShape s;
  unsigned grid = 1;
  void (*run)(const StepLaunch&, const ResizePlan&) = nullptr;  // nullptr: no output elements
};

template <typename T, typename I, bool kBilinear>
void launch_resize_typed(const StepLaunch& launch, const ResizePlan& plan) {
  const T* xp = static_cast<const T*>(launch.inputs.at(0).data);
  T* yp = static_cast<T*>(launch.outputs.at(0).data);
  launch_kernel(launch, resize_kernel<T, I, kBilinear>, plan.grid, kThreads, 0, xp, yp, plan.s);
}

using ResizeLauncher = void (*)(const StepLaunch&, const ResizePlan&);

template <typename T, typename I>
ResizeLauncher resize_launcher(bool bilinear) {
  return bilinear ? &launch_resize_typed<T, I, true> : &launch_resize_typed<T, I, false>;
}

ResizePlan prepare_resize(const StepLaunch& launch) {
  const Dims& x = launch.inputs.at(0).shape;
  const Dims& y = launch.outputs.at(0).shape;
  ResizePlan plan;
  ResizeShape& s = plan.s;
  s.planes = x[0] * x[1];
  s.h = x[2];
  s.w = x[3];
  s.oh = y[2];
  s.ow = y[3];
  s.align_corners = launch.attrs->get_bool("align_corners", false);
  s.scale_h = bilinear_scale(s.h, s.oh, s.align_corners);
  s.scale_w = bilinear_scale(s.w, s.ow, s.align_corners);
  const bool bilinear = launch.attrs->get_string("mode") == "bilinear";
  const std::int64_t total = s.planes * s.oh * s.ow;
  if (total == 0) return plan;
  plan.grid = grid_for(total);
  // nearest_source multiplies dst by in / out and in % out (each below in): products below out · in.
  const bool index32 = total <= kMaxIndex32 && s.planes * s.h * s.w <= kMaxIndex32 && s.oh * s.h <= kMaxIndex32 &&
                       s.ow * s.w <= kMaxIndex32;
  const bool handled = dispatch_float(launch.inputs.at(0).dtype, [&](auto tag) {
    using T = decltype(tag);
    plan.run = index32 ? resize_launcher<T, std::int32_t>(bilinear) : resize_launcher<T, std::int64_t>(bilinear);
  });
  if (!handled) launch.attrs->fail("unsupported dtype for the CUDA resize kernel");
  return plan;
}

void launch_resize(const StepLaunch& launch, const ResizePlan& plan) {
  if (plan.run == nullptr) return;
  plan.run(launch, plan);
}

// ---- supports ----

template <DataType kDtype>
bool supports_resize(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  if (!all_dtype<kDtype>(graph, layer, 4, 4)) return false;
  const auto mode = layer.attrs.find("mode");
  if (mode == layer.attrs.end()) return false;
  const auto* text = std::get_if<std::string>(&mode->second);
  return text != nullptr && (*text == "nearest" || *text == "bilinear");
}

}  // namespace

void register_resize_kernels(std::vector<KernelEntry>& kernels) {
  const std::vector<KernelEntry> entries = {
      // bilinear weights are computed in f64, as the CPU reference does
      TENSORACLE_CONV_ENTRIES("resize", "f64math_", "f64math_", "direct", supports_resize, prepare_resize,
                              launch_resize, 0, nullptr),
  };
  kernels.insert(kernels.end(), entries.begin(), entries.end());
}

}  // namespace tensoracle::cuda
