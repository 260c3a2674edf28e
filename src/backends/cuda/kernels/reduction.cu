// CUDA kernels of the reduction family: reduce_sum/mean/prod/max/min over any axes, argmax/argmin and top_k, with
// the semantics of the CPU reference (src/backends/cpu/kernels/reduction.cpp):
// - float sums, means and products accumulate in f64 (as the reference computes in double) and are rounded once to
//   the output dtype (f16/bf16 through f32, as the reference's from_f64); integers accumulate in int64 and wrap;
// - reduce_max/min return the first element (in row-major order of the reduced axes) that attains the extreme value,
//   and the first NaN when there is one (NaN propagates), which is what the reference's sequential loop returns,
//   ±0 and NaN bits included;
// - argmax/argmin return the first index of the extreme value, NaN counting as the most extreme;
// - top_k orders as a stable torch.sort: NaN above every number, equal values (also -0 and +0) by ascending index.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backends/cuda/check.hpp"
#include "backends/cuda/cuda_step.hpp"
#include "backends/cuda/kernels/common.cuh"

namespace tensoracle::cuda {

void register_reduction_kernels(std::vector<KernelEntry>& kernels);

namespace {

using kernels::launch_kernel;
using kernels::layer_name;
using kernels::wait_for_preceding_steps;

// ---- storage types and conversions ----

// f16 and bf16 are common.cuh's raw-bit storage types, converted by its helpers.
using kernels::BF16;
using kernels::F16;
using kernels::store_double;

template <typename T>
struct Traits;
template <>
struct Traits<float> {
  using Compute = float;  // max/min/arg/top_k compare in this type (exact for the stored values)
  using Sum = double;     // sums and products
  static constexpr bool kFloat = true;
};
template <>
struct Traits<double> {
  using Compute = double;
  using Sum = double;
  static constexpr bool kFloat = true;
};
template <>
struct Traits<F16> {
  using Compute = float;
  using Sum = double;
  static constexpr bool kFloat = true;
};
template <>
struct Traits<BF16> {
  using Compute = float;
  using Sum = double;
  static constexpr bool kFloat = true;
};
#define TENSORACLE_INT_TRAITS(T)                                                         \
  template <>                                                                            \
  struct Traits<T> {                                                                     \
    using Compute = std::int64_t;                                                        \
    using Sum = unsigned long long; /* NOLINT(runtime/int): wrapping int64 arithmetic */ \
    static constexpr bool kFloat = false;                                                \
  };
TENSORACLE_INT_TRAITS(std::int64_t)
TENSORACLE_INT_TRAITS(std::int32_t)
TENSORACLE_INT_TRAITS(std::int16_t)
TENSORACLE_INT_TRAITS(std::int8_t)
TENSORACLE_INT_TRAITS(std::uint8_t)
#undef TENSORACLE_INT_TRAITS

template <typename T>
using Compute = typename Traits<T>::Compute;

__device__ __forceinline__ float load_value(const float* p, std::int64_t i) { return p[i]; }
__device__ __forceinline__ double load_value(const double* p, std::int64_t i) { return p[i]; }
__device__ __forceinline__ float load_value(const F16* p, std::int64_t i) { return kernels::to_compute(p[i]); }
__device__ __forceinline__ float load_value(const BF16* p, std::int64_t i) { return kernels::to_compute(p[i]); }
template <typename I>
__device__ __forceinline__ std::int64_t load_value(const I* p, std::int64_t i) {
  return static_cast<std::int64_t>(p[i]);
}

// Stores a value of the compute type (exactly representable in T for max/min/top_k results).
__device__ __forceinline__ void store_compute(float* p, std::int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store_compute(double* p, std::int64_t i, double v) { p[i] = v; }
__device__ __forceinline__ void store_compute(F16* p, std::int64_t i, float v) { p[i] = kernels::f16_from_float(v); }
__device__ __forceinline__ void store_compute(BF16* p, std::int64_t i, float v) { p[i] = kernels::bf16_from_float(v); }
template <typename I>
__device__ __forceinline__ void store_compute(I* p, std::int64_t i, std::int64_t v) {
  p[i] = static_cast<I>(v);  // integers wrap to the dtype's width
}

template <typename C>
__device__ __forceinline__ bool is_nan_value(C v) {
  if constexpr (std::is_floating_point_v<C>) {
    return isnan(v);
  } else {
    return false;
  }
}

// ---- reduction policies ----
// Each policy has an accumulator (Acc), its identity, make (one element at reduced position r), combine (associative
// and, up to float rounding of sums, commutative) and store (count = elements folded into each output).

template <typename T>
struct SumPolicy {
  using Acc = typename Traits<T>::Sum;
  static __device__ __forceinline__ Acc identity() { return Acc(0); }
  static __device__ __forceinline__ Acc make(Compute<T> v, std::int64_t) { return static_cast<Acc>(v); }
  static __device__ __forceinline__ Acc combine(Acc a, Acc b) { return a + b; }
  template <typename Out>
  static __device__ __forceinline__ void store(Out* y, std::int64_t i, Acc a, std::int64_t) {
    if constexpr (Traits<T>::kFloat) {
      store_double(y, i, a);
    } else {
      store_compute(y, i, static_cast<std::int64_t>(a));
    }
  }
};

template <typename T>
struct ProdPolicy {
  using Acc = typename Traits<T>::Sum;
  static __device__ __forceinline__ Acc identity() { return Acc(1); }
  static __device__ __forceinline__ Acc make(Compute<T> v, std::int64_t) { return static_cast<Acc>(v); }
  static __device__ __forceinline__ Acc combine(Acc a, Acc b) { return a * b; }
  template <typename Out>
  static __device__ __forceinline__ void store(Out* y, std::int64_t i, Acc a, std::int64_t) {
    if constexpr (Traits<T>::kFloat) {
      store_double(y, i, a);
    } else {
      store_compute(y, i, static_cast<std::int64_t>(a));
    }
  }
};

// Floats only: the double sum divided by the count (an empty reduction gives 0 / 0 = NaN, as torch.mean).
template <typename T>
struct MeanPolicy {
  using Acc = double;
  static __device__ __forceinline__ Acc identity() { return 0.0; }
  static __device__ __forceinline__ Acc make(Compute<T> v, std::int64_t) { return static_cast<double>(v); }
  static __device__ __forceinline__ Acc combine(Acc a, Acc b) { return a + b; }
  template <typename Out>
  static __device__ __forceinline__ void store(Out* y, std::int64_t i, Acc a, std::int64_t count) {
    store_double(y, i, a / static_cast<double>(count));
  }
};

template <typename C>
struct BestAcc {
  C value;
  std::int64_t index;  // -1: no element yet
};

// The first (lowest index) most extreme element, NaN counting as the most extreme: reduce_max/min store its value,
// argmax/argmin its index.
template <typename T, bool kMax, bool kIndex>
struct BestPolicy {
  using C = Compute<T>;
  using Acc = BestAcc<C>;
  static __device__ __forceinline__ Acc identity() { return Acc{C(0), -1}; }
  static __device__ __forceinline__ Acc make(C v, std::int64_t r) { return Acc{v, r}; }
  // True when a comes before b in the order "more extreme first, then lower index".
  static __device__ __forceinline__ bool better(const Acc& a, const Acc& b) {
    const bool an = is_nan_value(a.value), bn = is_nan_value(b.value);
    if (an || bn) return an && (!bn || a.index < b.index);
    if (a.value == b.value) return a.index < b.index;
    return kMax ? a.value > b.value : a.value < b.value;
  }
  static __device__ __forceinline__ Acc combine(const Acc& a, const Acc& b) {
    if (a.index < 0) return b;
    if (b.index < 0) return a;
    return better(b, a) ? b : a;
  }
  template <typename Out>
  static __device__ __forceinline__ void store(Out* y, std::int64_t i, const Acc& a, std::int64_t) {
    if constexpr (kIndex) {
      y[i] = a.index;
    } else {
      store_compute(y, i, a.value);
    }
  }
};

// ---- index maps ----

constexpr int kMaxMapDims = 8;  // coalesced kept (or reduced) groups; a rank-16 tensor has at most 8 of each
constexpr int kMaxRank = 16;

// Row-major decomposition of a linear index over `size`, giving the input offset sum(coord * stride).
struct IndexMap {
  int n = 0;
  std::int64_t size[kMaxMapDims] = {};
  std::int64_t stride[kMaxMapDims] = {};
};

__device__ __forceinline__ std::int64_t map_offset(const IndexMap& m, std::int64_t idx) {
  if (m.n <= 1) return m.n == 0 ? 0 : idx * m.stride[0];
  std::int64_t off = 0;
  for (int d = m.n - 1; d > 0; --d) {
    const std::int64_t q = idx / m.size[d];
    off += (idx - q * m.size[d]) * m.stride[d];
    idx = q;
  }
  return off + idx * m.stride[0];
}

// ---- the reduce kernel ----
// A block of kBlock threads covers `bx` consecutive outputs with `by` threads each (bx * by == kBlock). In row mode
// (the innermost input axis is reduced) the `by` threads of an output are adjacent lanes and walk adjacent elements;
// in column mode (the innermost axis is kept) adjacent lanes take adjacent outputs. blockIdx.y is the split of the
// reduced range: with splits > 1 each block writes its partial to `partials` and reduce_finish_kernel combines them.

constexpr int kBlock = 256;

template <typename T, typename Out, typename P>
__global__ void __launch_bounds__(kBlock)
    reduce_kernel(const T* __restrict__ x, Out* __restrict__ y, IndexMap outs, IndexMap reds, std::int64_t num_out,
                  std::int64_t count, int by, bool row_mode, std::int64_t r_chunk, typename P::Acc* partials) {
  wait_for_preceding_steps();
  using Acc = typename P::Acc;
  __shared__ __align__(16) unsigned char shared_raw[kBlock * sizeof(Acc)];
  Acc* sh = reinterpret_cast<Acc*>(shared_raw);
  const int tid = static_cast<int>(threadIdx.x);
  const int bx = kBlock / by;
  const int lane = row_mode ? tid % by : tid / bx;
  const int ol = row_mode ? tid / by : tid % bx;
  const std::int64_t split = blockIdx.y;
  const std::int64_t r0 = split * r_chunk;
  const std::int64_t r1 = min(count, r0 + r_chunk);
  const std::int64_t tiles = (num_out + bx - 1) / bx;
  for (std::int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const std::int64_t t = tile * bx + ol;
    Acc acc = P::identity();
    if (t < num_out) {
      const std::int64_t base = map_offset(outs, t);
      for (std::int64_t r = r0 + lane; r < r1; r += by)
        acc = P::combine(acc, P::make(load_value(x, base + map_offset(reds, r)), r));
    }
    sh[ol * by + lane] = acc;
    __syncthreads();
    for (int stride = by >> 1; stride > 0; stride >>= 1) {
      if (lane < stride) sh[ol * by + lane] = P::combine(sh[ol * by + lane], sh[ol * by + lane + stride]);
      __syncthreads();
    }
    if (lane == 0 && t < num_out) {
      if (gridDim.y == 1) {
        P::store(y, t, sh[ol * by], count);
      } else {
        partials[split * num_out + t] = sh[ol * by];
      }
    }
    __syncthreads();
  }
}

template <typename Out, typename P>
__global__ void reduce_finish_kernel(Out* __restrict__ y, const typename P::Acc* __restrict__ partials,
                                     std::int64_t num_out, std::int64_t count, int splits) {
  wait_for_preceding_steps();
  for (std::int64_t t = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; t < num_out;
       t += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    typename P::Acc acc = P::identity();
    for (int s = 0; s < splits; ++s) acc = P::combine(acc, partials[s * num_out + t]);
    P::store(y, t, acc, count);
  }
}

// ---- host side ----

constexpr std::size_t kReduceWorkspace = std::size_t{2} << 20;  // partials of split reductions

// The SM count of the current device (at prepare, the engine's), for sizing split reductions.
int multiprocessors(const StepLaunch& launch) {
  int device = 0;
  TENSORACLE_CUDA_CHECK(cudaGetDevice(&device), layer_name(launch));
  int sms = 0;
  TENSORACLE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), layer_name(launch));
  return std::max(sms, 1);
}

int pow2_at_least(std::int64_t n, int cap) {
  int p = 1;
  while (p < cap && p < n) p <<= 1;
  return p;
}

// The reduction as maps: outputs over the kept axes, the reduced range over the reduced axes (both row-major).
struct ReduceMaps {
  IndexMap outs;
  IndexMap reds;
  std::int64_t num_out = 1;
  std::int64_t count = 1;
  bool row_mode = true;
  std::int64_t inner_kept = 1;  // extent of the innermost kept group (column mode)
};

ReduceMaps make_maps(const StepLaunch& launch, const Dims& shape, const std::vector<bool>& reduced) {
  ReduceMaps maps;
  const int rank = shape.rank();
  if (rank > kMaxRank) launch.attrs->fail("the CUDA reduction kernels take tensors of rank <= 16");
  std::vector<std::int64_t> strides(static_cast<std::size_t>(rank), 1);
  for (int i = rank - 2; i >= 0; --i)
    strides[static_cast<std::size_t>(i)] = strides[static_cast<std::size_t>(i) + 1] * shape[i + 1];
  // Coalesce: drop size-1 axes and merge neighbours of the same kind (row-major contiguous).
  struct Group {
    std::int64_t size;
    std::int64_t stride;
    bool reduced;
  };
  std::vector<Group> groups;
  for (int i = 0; i < rank; ++i) {
    const bool red = reduced[static_cast<std::size_t>(i)];
    if (red) {
      maps.count *= shape[i];
    } else {
      maps.num_out *= shape[i];
    }
    if (shape[i] == 1) continue;
    if (!groups.empty() && groups.back().reduced == red) {
      groups.back().size *= shape[i];
      groups.back().stride = strides[static_cast<std::size_t>(i)];
    } else {
      groups.push_back({shape[i], strides[static_cast<std::size_t>(i)], red});
    }
  }
  for (const Group& g : groups) {
    IndexMap& m = g.reduced ? maps.reds : maps.outs;
    if (m.n == kMaxMapDims) launch.attrs->fail("too many separate reduced axes for the CUDA reduction kernels");
    m.size[m.n] = g.size;
    m.stride[m.n] = g.stride;
    ++m.n;
  }
  maps.row_mode = groups.empty() || groups.back().reduced;
  if (!maps.row_mode) maps.inner_kept = groups.back().size;
  return maps;
}

// A reduce_* or arg* step as prepared: the maps, reduce_kernel's geometry (and reduce_finish_kernel's when the
// reduced range is split over blocks) and the instantiation that launches them.
struct ReducePlan {
  ReduceMaps maps;
  bool empty = false;  // no outputs: nothing to launch
  int by = 1;          // threads per output
  dim3 grid;           // output tiles x splits of the reduced range
  std::int64_t r_chunk = 1;
  std::int64_t splits = 1;
  unsigned finish_blocks = 0;                                   // reduce_finish_kernel's grid (splits > 1)
  void (*run)(const StepLaunch&, const ReducePlan&) = nullptr;  // run_reduce<T, Out, P>
};

template <typename T, typename Out, typename P>
void run_reduce(const StepLaunch& launch, const ReducePlan& plan) {
  using Acc = typename P::Acc;
  const T* x = static_cast<const T*>(launch.inputs.at(0).data);
  Out* y = static_cast<Out*>(launch.outputs.at(0).data);
  const ReduceMaps& maps = plan.maps;
  Acc* partials = plan.splits > 1 ? static_cast<Acc*>(launch.workspace) : nullptr;
  launch_kernel(launch, reduce_kernel<T, Out, P>, plan.grid, kBlock, 0, x, y, maps.outs, maps.reds, maps.num_out,
                maps.count, plan.by, maps.row_mode, plan.r_chunk, partials);
  if (plan.splits > 1) {
    launch_kernel(launch, reduce_finish_kernel<Out, P>, plan.finish_blocks, kBlock, 0, y, partials, maps.num_out,
                  maps.count, static_cast<int>(plan.splits));
  }
}

// Sizes the launch of run_reduce<T, Out, P> for plan.maps (not empty).
template <typename T, typename Out, typename P>
void plan_reduce(const StepLaunch& launch, ReducePlan& plan) {
  using Acc = typename P::Acc;
  const ReduceMaps& maps = plan.maps;
  const std::int64_t num_out = maps.num_out, count = maps.count;
  // Threads per output (by) and outputs per block (bx).
  int by = 1;
  if (maps.row_mode) {
    by = pow2_at_least(count, kBlock);
  } else {
    const int bx = pow2_at_least(maps.inner_kept, kBlock);
    by = std::min(kBlock / bx, pow2_at_least(count, kBlock));
  }
  const int bx = kBlock / by;
  const std::int64_t tiles = (num_out + bx - 1) / bx;
  // Split the reduced range over several blocks when there are too few output tiles to fill the device.
  const std::int64_t target = static_cast<std::int64_t>(multiprocessors(launch)) * 8;
  const std::int64_t max_partials =
      static_cast<std::int64_t>(std::min(launch.workspace_bytes, kReduceWorkspace) / sizeof(Acc));
  std::int64_t splits = 1;
  if (launch.workspace != nullptr && tiles < target && count / by > 64) {
    splits = std::min<std::int64_t>({(target + tiles - 1) / tiles, count / (static_cast<std::int64_t>(by) * 32),
                                     max_partials / std::max<std::int64_t>(num_out, 1), 65535});
    splits = std::max<std::int64_t>(splits, 1);
  }
  std::int64_t r_chunk = count;
  if (splits > 1) {
    r_chunk = (count + splits - 1) / splits;
    splits = (count + r_chunk - 1) / r_chunk;
  }
  plan.by = by;
  plan.grid = dim3(static_cast<unsigned>(std::min<std::int64_t>(tiles, 1 << 20)), static_cast<unsigned>(splits));
  plan.r_chunk = r_chunk;
  plan.splits = splits;
  plan.finish_blocks = static_cast<unsigned>(std::min<std::int64_t>((num_out + kBlock - 1) / kBlock, 1 << 20));
  plan.run = &run_reduce<T, Out, P>;
}

template <typename T>
struct Tag {
  using type = T;
};

// Calls f(Tag<T>{}) for the storage type of dtype; false when the dtype is not one of the reduction dtypes.
template <bool kIntegers, typename F>
bool dispatch(DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::kF32: f(Tag<float>{}); return true;
    case DataType::kF64: f(Tag<double>{}); return true;
    case DataType::kF16: f(Tag<F16>{}); return true;
    case DataType::kBF16: f(Tag<BF16>{}); return true;
    default: break;
  }
  if constexpr (kIntegers) {
    switch (dtype) {
      case DataType::kI64: f(Tag<std::int64_t>{}); return true;
      case DataType::kI32: f(Tag<std::int32_t>{}); return true;
      case DataType::kI16: f(Tag<std::int16_t>{}); return true;
      case DataType::kI8: f(Tag<std::int8_t>{}); return true;
      case DataType::kU8: f(Tag<std::uint8_t>{}); return true;
      default: break;
    }
  }
  return false;
}

enum class ReduceOp { kSum, kMean, kProd, kMax, kMin };

std::int64_t normalize_axis(const StepLaunch& launch, std::int64_t axis, int rank) {
  if (rank == 0 && (axis == 0 || axis == -1)) return 0;
  if (axis < -rank || axis >= rank) launch.attrs->fail("axis out of range");
  return axis < 0 ? axis + rank : axis;
}

template <ReduceOp kOp>
ReducePlan prepare_reduce(const StepLaunch& launch) {
  const DeviceTensor& in = launch.inputs.at(0);
  const int rank = in.shape.rank();
  const auto axes = launch.attrs->get_ints("axes", std::vector<std::int64_t>{});
  std::vector<bool> reduced(static_cast<std::size_t>(rank), axes.empty());
  for (std::int64_t a : axes) {
    const std::int64_t axis = normalize_axis(launch, a, rank);
    if (rank > 0) reduced[static_cast<std::size_t>(axis)] = true;
  }
  ReducePlan plan;
  plan.maps = make_maps(launch, in.shape, reduced);
  if (plan.maps.num_out == 0) {
    plan.empty = true;
    return plan;
  }
  if (plan.maps.count == 0 && (kOp == ReduceOp::kMax || kOp == ReduceOp::kMin)) {
    launch.attrs->fail("reducing an empty axis with max/min is undefined");
  }
  const bool handled = dispatch<kOp != ReduceOp::kMean>(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kOp == ReduceOp::kSum) plan_reduce<T, T, SumPolicy<T>>(launch, plan);
    if constexpr (kOp == ReduceOp::kProd) plan_reduce<T, T, ProdPolicy<T>>(launch, plan);
    if constexpr (kOp == ReduceOp::kMax) plan_reduce<T, T, BestPolicy<T, true, false>>(launch, plan);
    if constexpr (kOp == ReduceOp::kMin) plan_reduce<T, T, BestPolicy<T, false, false>>(launch, plan);
    if constexpr (kOp == ReduceOp::kMean) {
      if constexpr (Traits<T>::kFloat) plan_reduce<T, T, MeanPolicy<T>>(launch, plan);
    }
  });
  if (!handled) launch.attrs->fail("unsupported dtype for the CUDA reduction kernel");
  return plan;
}

template <bool kMax>
ReducePlan prepare_arg_reduce(const StepLaunch& launch) {
  const DeviceTensor& in = launch.inputs.at(0);
  const int rank = in.shape.rank();
  const std::int64_t axis = normalize_axis(launch, launch.attrs->get_int("axis"), rank);
  std::vector<bool> reduced(static_cast<std::size_t>(rank), false);
  if (rank > 0) reduced[static_cast<std::size_t>(axis)] = true;
  ReducePlan plan;
  plan.maps = make_maps(launch, in.shape, reduced);
  if (plan.maps.num_out == 0) {
    plan.empty = true;
    return plan;
  }
  if (plan.maps.count == 0) launch.attrs->fail("argmax/argmin of an empty axis is undefined");
  const bool handled = dispatch<true>(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    plan_reduce<T, std::int64_t, BestPolicy<T, kMax, true>>(launch, plan);
  });
  if (!handled) launch.attrs->fail("unsupported dtype for the CUDA arg-reduction kernel");
  return plan;
}

// Every reduce_* and arg* entry: the planned instantiation with this enqueue's addresses.
void launch_reduce(const StepLaunch& launch, const ReducePlan& plan) {
  if (plan.empty) return;
  plan.run(launch, plan);
}

// ---- top_k ----
// One block per row (an (outer, inner) position; the row's elements are `inner` apart). Elements become unsigned keys
// whose descending order is the output order (NaN highest for largest, lowest for smallest; -0 as +0), ties broken by
// ascending index, so (key, index) is a strict total order and any correct sort gives the stable result.
// Rows of up to kSortCap elements are sorted whole in shared memory (bitonic); longer rows first find the k-th key by
// a radix select (8 bits per pass), gather the elements above it plus the first ties in index order, then sort those.

constexpr int kSortCap = 2048;
constexpr int kTopKThreads = 512;

template <typename T>
struct KeyOf {
  using type = std::uint32_t;
};
template <>
struct KeyOf<double> {
  using type = unsigned long long;  // NOLINT(runtime/int)
};
template <>
struct KeyOf<std::int64_t> {
  using type = unsigned long long;  // NOLINT(runtime/int)
};

template <typename T>
__device__ __forceinline__ typename KeyOf<T>::type make_key(Compute<T> v, bool largest) {
  using K = typename KeyOf<T>::type;
  K key;
  if constexpr (std::is_same_v<Compute<T>, float>) {
    if (isnan(v)) {
      key = 0xFFFFFFFFU;
    } else {
      const std::uint32_t u = __float_as_uint(v == 0.0f ? 0.0f : v);
      key = (u & 0x80000000U) != 0 ? ~u : (u | 0x80000000U);
    }
  } else if constexpr (std::is_same_v<Compute<T>, double>) {
    if (isnan(v)) {
      key = ~0ULL;
    } else {
      const auto u = static_cast<unsigned long long>(__double_as_longlong(v == 0.0 ? 0.0 : v));  // NOLINT
      key = (u >> 63) != 0 ? ~u : (u | (1ULL << 63));
    }
  } else if constexpr (sizeof(K) == 8) {
    key = static_cast<K>(v) ^ (1ULL << 63);
  } else {
    key = static_cast<K>(static_cast<std::int32_t>(v)) ^ 0x80000000U;
  }
  return largest ? key : ~key;
}

// Sorts keys[0, n) (n a power of two) so that (key descending, index ascending).
template <typename K>
__device__ void bitonic_sort(K* keys, std::int32_t* idx, int n) {
  for (int size = 2; size <= n; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int t = static_cast<int>(threadIdx.x); t < n / 2; t += static_cast<int>(blockDim.x)) {
        const int i = 2 * t - (t & (stride - 1));
        const int j = i + stride;
        const K ki = keys[i], kj = keys[j];
        const std::int32_t ii = idx[i], ij = idx[j];
        const bool j_before_i = kj > ki || (kj == ki && ij < ii);
        const bool forward = (i & size) == 0;  // this half sorts in output order
        if (forward == j_before_i) {
          keys[i] = kj;
          keys[j] = ki;
          idx[i] = ij;
          idx[j] = ii;
        }
      }
      __syncthreads();
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kTopKThreads)
    top_k_kernel(const T* __restrict__ x, T* __restrict__ values, std::int64_t* __restrict__ indices, std::int64_t rows,
                 std::int64_t inner, std::int64_t len, std::int64_t k, bool largest) {
  wait_for_preceding_steps();
  using K = typename KeyOf<T>::type;
  __shared__ K keys[kSortCap];
  __shared__ std::int32_t idx[kSortCap];
  __shared__ unsigned hist[256];
  __shared__ unsigned warp_counts[kTopKThreads / 32];
  __shared__ K s_prefix, s_mask;
  __shared__ long long s_remaining;  // NOLINT(runtime/int)
  __shared__ int s_pos;
  __shared__ long long s_ties;  // NOLINT(runtime/int)
  const int tid = static_cast<int>(threadIdx.x);
  const int nthreads = static_cast<int>(blockDim.x);
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const std::int64_t o = row / inner;
    const std::int64_t base = o * len * inner + (row - o * inner);
    const std::int64_t out_base = o * k * inner + (row - o * inner);
    int n = 1;  // sorted extent (power of two)
    if (len <= kSortCap) {
      while (n < len) n <<= 1;
      for (int j = tid; j < n; j += nthreads) {
        if (j < len) {
          keys[j] = make_key<T>(load_value(x, base + j * inner), largest);
          idx[j] = j;
        } else {
          keys[j] = 0;
          idx[j] = INT32_MAX;  // sorts after every element
        }
      }
      __syncthreads();
    } else {
      // Radix select of the k-th key (descending).
      if (tid == 0) {
        s_prefix = 0;
        s_mask = 0;
        s_remaining = k;
      }
      for (int shift = static_cast<int>(sizeof(K)) * 8 - 8; shift >= 0; shift -= 8) {
        for (int b = tid; b < 256; b += nthreads) hist[b] = 0;
        __syncthreads();
        const K prefix = s_prefix, mask = s_mask;
        for (std::int64_t j = tid; j < len; j += nthreads) {
          const K key = make_key<T>(load_value(x, base + j * inner), largest);
          if ((key & mask) == prefix) atomicAdd(&hist[static_cast<int>((key >> shift) & 0xFF)], 1U);
        }
        __syncthreads();
        if (tid == 0) {
          long long remaining = s_remaining;  // NOLINT(runtime/int)
          for (int d = 255; d >= 0; --d) {
            const long long c = hist[d];  // NOLINT(runtime/int)
            if (c >= remaining) {
              s_prefix = prefix | (static_cast<K>(d) << shift);
              s_mask = mask | (static_cast<K>(0xFF) << shift);
              break;
            }
            remaining -= c;
          }
          s_remaining = remaining;
        }
        __syncthreads();
      }
      const K threshold = s_prefix;
      const long long need_ties = s_remaining;  // NOLINT(runtime/int): elements equal to threshold to take
      if (tid == 0) {
        s_pos = 0;
        s_ties = 0;
      }
      __syncthreads();
      const int lane = tid & 31, warp = tid >> 5, warps = (nthreads + 31) >> 5;
      for (std::int64_t c0 = 0; c0 < len; c0 += nthreads) {
        const std::int64_t j = c0 + tid;
        K key = 0;
        if (j < len) key = make_key<T>(load_value(x, base + j * inner), largest);
        const bool greater = j < len && key > threshold;
        const bool tie = j < len && key == threshold;
        if (greater) {
          const int p = atomicAdd(&s_pos, 1);
          keys[p] = key;
          idx[p] = static_cast<std::int32_t>(j);
        }
        // Rank of this tie among the ties in index order.
        const unsigned ballot = __ballot_sync(0xFFFFFFFFU, tie);
        if (lane == 0) warp_counts[warp] = static_cast<unsigned>(__popc(ballot));
        __syncthreads();
        long long rank = s_ties;   // NOLINT(runtime/int)
        long long chunk_ties = 0;  // NOLINT(runtime/int)
        for (int w = 0; w < warps; ++w) {
          if (w < warp) rank += warp_counts[w];
          chunk_ties += warp_counts[w];
        }
        rank += __popc(ballot & ((1U << lane) - 1U));
        if (tie && rank < need_ties) {
          const int p = atomicAdd(&s_pos, 1);
          keys[p] = key;
          idx[p] = static_cast<std::int32_t>(j);
        }
        __syncthreads();
        if (tid == 0) s_ties += chunk_ties;
        __syncthreads();
        if (s_pos >= k) break;  // uniform: read after the barrier
      }
      while (n < k) n <<= 1;
      for (int j = static_cast<int>(k) + tid; j < n; j += nthreads) {
        keys[j] = 0;
        idx[j] = INT32_MAX;
      }
      __syncthreads();
    }
    bitonic_sort(keys, idx, n);
    for (int j = tid; j < k; j += nthreads) {
      const std::int64_t src = idx[j];
      store_compute(values, out_base + j * inner, load_value(x, base + src * inner));
      indices[out_base + j * inner] = src;
    }
    __syncthreads();
  }
}

// A top_k step as prepared: the geometry, k and the direction, the block size and the dtype's instantiation.
struct TopKPlan {
  bool empty = false;  // no rows or k = 0: nothing to launch
  std::int64_t rows = 0, inner = 1, len = 0, k = 0;
  bool largest = true;
  int threads = kTopKThreads;
  unsigned blocks = 0;
  void (*run)(const StepLaunch&, const TopKPlan&) = nullptr;  // run_top_k<T>
};

template <typename T>
void run_top_k(const StepLaunch& launch, const TopKPlan& plan) {
  launch_kernel(launch, top_k_kernel<T>, plan.blocks, plan.threads, 0, static_cast<const T*>(launch.inputs.at(0).data),
                static_cast<T*>(launch.outputs.at(0).data), static_cast<std::int64_t*>(launch.outputs.at(1).data),
                plan.rows, plan.inner, plan.len, plan.k, plan.largest);
}

TopKPlan prepare_top_k(const StepLaunch& launch) {
  const DeviceTensor& in = launch.inputs.at(0);
  const int rank = in.shape.rank();
  if (rank < 1) launch.attrs->fail("top_k needs rank >= 1");
  const std::int64_t k = launch.attrs->get_int("k");
  const bool largest = launch.attrs->get_bool("largest", true);
  const auto axis = static_cast<int>(normalize_axis(launch, launch.attrs->get_int("axis", -1), rank));
  std::int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= in.shape[i];
  for (int i = axis + 1; i < rank; ++i) inner *= in.shape[i];
  const std::int64_t len = in.shape[axis];
  if (k < 0 || k > len) launch.attrs->fail("k is larger than the axis");
  if (k > kSortCap && len > kSortCap) launch.attrs->fail("the CUDA top_k kernel takes k <= 2048");
  if (len > std::numeric_limits<std::int32_t>::max()) launch.attrs->fail("the CUDA top_k kernel takes axes < 2^31");
  TopKPlan plan;
  plan.rows = outer * inner;
  plan.inner = inner;
  plan.len = len;
  plan.k = k;
  plan.largest = largest;
  if (plan.rows == 0 || k == 0) {
    plan.empty = true;
    return plan;
  }
  if (len <= kSortCap) plan.threads = std::max(32, std::min(kTopKThreads, pow2_at_least(len, kSortCap) / 2));
  plan.blocks = static_cast<unsigned>(std::min<std::int64_t>(plan.rows, 1 << 20));
  const bool handled = dispatch<true>(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    plan.run = &run_top_k<T>;
  });
  if (!handled) launch.attrs->fail("unsupported dtype for the CUDA top_k kernel");
  return plan;
}

void launch_top_k(const StepLaunch& launch, const TopKPlan& plan) {
  if (plan.empty) return;
  plan.run(launch, plan);
}

// ---- supports ----

bool has_input(const graph::Layer& layer, std::size_t i) { return i < layer.inputs.size() && layer.inputs[i] >= 0; }

template <DataType kDtype>
bool same_dtype_io(const graph::Graph& graph, const graph::Layer& layer) {
  return has_input(layer, 0) && graph.tensor(layer.inputs[0]).dtype == kDtype && !layer.outputs.empty() &&
         graph.tensor(layer.outputs[0]).dtype == kDtype &&
         graph.tensor(layer.inputs[0]).shape.size() <= static_cast<std::size_t>(kMaxRank);
}

template <DataType kDtype>
bool supports_reduce(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  return same_dtype_io<kDtype>(graph, layer);
}

template <DataType kDtype>
bool supports_arg(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  return has_input(layer, 0) && graph.tensor(layer.inputs[0]).dtype == kDtype && !layer.outputs.empty() &&
         graph.tensor(layer.outputs[0]).dtype == DataType::kI64 &&
         graph.tensor(layer.inputs[0]).shape.size() <= static_cast<std::size_t>(kMaxRank);
}

template <DataType kDtype>
bool supports_top_k(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  if (!has_input(layer, 0) || layer.outputs.size() != 2) return false;
  if (graph.tensor(layer.inputs[0]).dtype != kDtype || graph.tensor(layer.outputs[0]).dtype != kDtype ||
      graph.tensor(layer.outputs[1]).dtype != DataType::kI64) {
    return false;
  }
  const graph::AttrReader attrs(layer.attrs, layer.name, layer.op);
  const std::int64_t k = attrs.get_int("k");
  return k >= 0 && k <= kSortCap;
}

}  // namespace

// Float sums, means and products accumulate in f64; integer ones in int64 (wrapping).
#define TENSORACLE_REDUCE_ENTRY(NAME, OP, SUPPORTS, PREPARE) \
  prepared_kernel<PREPARE, launch_reduce>(NAME, OP, SUPPORTS, kReduceWorkspace)
#define TENSORACLE_REDUCE_INT_ENTRIES(OP, PREPARE, SUFFIX)                                              \
  TENSORACLE_REDUCE_ENTRY(OP "_i64_tiled", OP, supports_reduce<DataType::kI64>, PREPARE),               \
      TENSORACLE_REDUCE_ENTRY(OP "_i32" SUFFIX "_tiled", OP, supports_reduce<DataType::kI32>, PREPARE), \
      TENSORACLE_REDUCE_ENTRY(OP "_i16" SUFFIX "_tiled", OP, supports_reduce<DataType::kI16>, PREPARE), \
      TENSORACLE_REDUCE_ENTRY(OP "_i8" SUFFIX "_tiled", OP, supports_reduce<DataType::kI8>, PREPARE),   \
      TENSORACLE_REDUCE_ENTRY(OP "_u8" SUFFIX "_tiled", OP, supports_reduce<DataType::kU8>, PREPARE)
#define TENSORACLE_REDUCE_FLOAT_ENTRIES(OP, PREPARE, SUFFIX)                                              \
  TENSORACLE_REDUCE_ENTRY(OP "_f32" SUFFIX "_tiled", OP, supports_reduce<DataType::kF32>, PREPARE),       \
      TENSORACLE_REDUCE_ENTRY(OP "_f16" SUFFIX "_tiled", OP, supports_reduce<DataType::kF16>, PREPARE),   \
      TENSORACLE_REDUCE_ENTRY(OP "_bf16" SUFFIX "_tiled", OP, supports_reduce<DataType::kBF16>, PREPARE), \
      TENSORACLE_REDUCE_ENTRY(OP "_f64_tiled", OP, supports_reduce<DataType::kF64>, PREPARE)
#define TENSORACLE_ARG_ENTRIES(OP, PREPARE)                                                  \
  TENSORACLE_REDUCE_ENTRY(OP "_f32_tiled", OP, supports_arg<DataType::kF32>, PREPARE),       \
      TENSORACLE_REDUCE_ENTRY(OP "_f16_tiled", OP, supports_arg<DataType::kF16>, PREPARE),   \
      TENSORACLE_REDUCE_ENTRY(OP "_bf16_tiled", OP, supports_arg<DataType::kBF16>, PREPARE), \
      TENSORACLE_REDUCE_ENTRY(OP "_f64_tiled", OP, supports_arg<DataType::kF64>, PREPARE),   \
      TENSORACLE_REDUCE_ENTRY(OP "_i64_tiled", OP, supports_arg<DataType::kI64>, PREPARE),   \
      TENSORACLE_REDUCE_ENTRY(OP "_i32_tiled", OP, supports_arg<DataType::kI32>, PREPARE),   \
      TENSORACLE_REDUCE_ENTRY(OP "_i16_tiled", OP, supports_arg<DataType::kI16>, PREPARE),   \
      TENSORACLE_REDUCE_ENTRY(OP "_i8_tiled", OP, supports_arg<DataType::kI8>, PREPARE),     \
      TENSORACLE_REDUCE_ENTRY(OP "_u8_tiled", OP, supports_arg<DataType::kU8>, PREPARE)
#define TENSORACLE_TOP_K_ENTRY(DT, NAME) \
  prepared_kernel<prepare_top_k, launch_top_k>("top_k_" NAME "_select", "top_k", supports_top_k<DataType::DT>, 0)

void register_reduction_kernels(std::vector<KernelEntry>& kernels) {
  const std::vector<KernelEntry> entries = {
      TENSORACLE_REDUCE_FLOAT_ENTRIES("reduce_sum", prepare_reduce<ReduceOp::kSum>, "_f64acc"),
      TENSORACLE_REDUCE_INT_ENTRIES("reduce_sum", prepare_reduce<ReduceOp::kSum>, "_i64acc"),
      TENSORACLE_REDUCE_FLOAT_ENTRIES("reduce_mean", prepare_reduce<ReduceOp::kMean>, "_f64acc"),
      TENSORACLE_REDUCE_FLOAT_ENTRIES("reduce_prod", prepare_reduce<ReduceOp::kProd>, "_f64acc"),
      TENSORACLE_REDUCE_INT_ENTRIES("reduce_prod", prepare_reduce<ReduceOp::kProd>, "_i64acc"),
      TENSORACLE_REDUCE_FLOAT_ENTRIES("reduce_max", prepare_reduce<ReduceOp::kMax>, ""),
      TENSORACLE_REDUCE_INT_ENTRIES("reduce_max", prepare_reduce<ReduceOp::kMax>, ""),
      TENSORACLE_REDUCE_FLOAT_ENTRIES("reduce_min", prepare_reduce<ReduceOp::kMin>, ""),
      TENSORACLE_REDUCE_INT_ENTRIES("reduce_min", prepare_reduce<ReduceOp::kMin>, ""),
      TENSORACLE_ARG_ENTRIES("argmax", prepare_arg_reduce<true>),
      TENSORACLE_ARG_ENTRIES("argmin", prepare_arg_reduce<false>),
      TENSORACLE_TOP_K_ENTRY(kF32, "f32"),
      TENSORACLE_TOP_K_ENTRY(kF16, "f16"),
      TENSORACLE_TOP_K_ENTRY(kBF16, "bf16"),
      TENSORACLE_TOP_K_ENTRY(kF64, "f64"),
      TENSORACLE_TOP_K_ENTRY(kI64, "i64"),
      TENSORACLE_TOP_K_ENTRY(kI32, "i32"),
      TENSORACLE_TOP_K_ENTRY(kI16, "i16"),
      TENSORACLE_TOP_K_ENTRY(kI8, "i8"),
      TENSORACLE_TOP_K_ENTRY(kU8, "u8"),
  };
  kernels.insert(kernels.end(), entries.begin(), entries.end());
}

#undef TENSORACLE_REDUCE_ENTRY
#undef TENSORACLE_REDUCE_INT_ENTRIES
#undef TENSORACLE_REDUCE_FLOAT_ENTRIES
#undef TENSORACLE_ARG_ENTRIES
#undef TENSORACLE_TOP_K_ENTRY

}  // namespace tensoracle::cuda
