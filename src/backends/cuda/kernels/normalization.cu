// CUDA kernels of the normalization family: softmax, log_softmax, layer/rms/batch/group/instance norm.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "backends/cuda/cuda_step.hpp"
#include "backends/cuda/kernels/common.cuh"

namespace tensoracle::cuda {
namespace {

using namespace kernels;  // NOLINT(google-build-using-namespace): the shared helpers of this backend's kernels

constexpr int kWarpRowsThreads = 128;  // warp-per-row kernels: 4 rows per block
constexpr int kBlockRowThreads = 512;  // block-per-row kernels
constexpr int kWarpRowMax = 1024;      // rows up to this length take one warp

template <typename T>
__device__ __forceinline__ Compute<T> load_or(const T* p, std::int64_t i, Compute<T> absent) {
  return p != nullptr ? load(p, i) : absent;
}

// ---- softmax / log_softmax ----
// As the CPU reference: the row maximum (NaN if any element is NaN) is subtracted first, then
// softmax = exp(x - max) / sum(exp(x - max)) and log_softmax = (x - max) - log(sum). A row of -inf, or one holding
// +inf or NaN, gives NaN everywhere.

// One warp per row of length <= 32 * kPerLane, the row cached in registers.
template <typename T, int kPerLane, bool kLog>
__global__ void softmax_warp_kernel(const T* x, T* y, std::int64_t rows, int len) {
  wait_for_preceding_steps();
  using C = Compute<T>;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const std::int64_t warps_per_block = blockDim.x >> 5;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * warps_per_block;
  for (std::int64_t row = blockIdx.x * warps_per_block + (threadIdx.x >> 5); row < rows; row += stride) {
    const T* xr = x + row * len;
    T* yr = y + row * len;
    C v[kPerLane];
    C m = -math::infinity<C>();
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int j = lane + k * 32;
      v[k] = j < len ? load(xr, j) : C(0);
      if (j < len) m = NanMaxOp{}(m, v[k]);
    }
    m = warp_reduce(m, NanMaxOp{});
    C sum = 0;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int j = lane + k * 32;
      if (j < len) {
        v[k] = v[k] - m;
        sum += math::exp(v[k]);
      }
    }
    sum = warp_reduce(sum, SumOp{});
    const C log_sum = kLog ? math::log(sum) : C(0);
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int j = lane + k * 32;
      if (j < len) store(yr, j, kLog ? v[k] - log_sum : math::exp(v[k]) / sum);
    }
  }
}

// One block per row (long rows); three passes over the row.
template <typename T, bool kLog>
__global__ void softmax_block_kernel(const T* x, T* y, std::int64_t rows, std::int64_t len) {
  wait_for_preceding_steps();
  using C = Compute<T>;
  __shared__ C scratch[32];
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * len;
    T* yr = y + row * len;
    C m = -math::infinity<C>();
    for (std::int64_t j = threadIdx.x; j < len; j += blockDim.x) m = NanMaxOp{}(m, load(xr, j));
    m = block_reduce(m, NanMaxOp{}, -math::infinity<C>(), scratch);
    C sum = 0;
    for (std::int64_t j = threadIdx.x; j < len; j += blockDim.x) sum += math::exp(load(xr, j) - m);
    sum = block_reduce(sum, SumOp{}, C(0), scratch);
    const C log_sum = kLog ? math::log(sum) : C(0);
    for (std::int64_t j = threadIdx.x; j < len; j += blockDim.x) {
      const C shifted = load(xr, j) - m;
      store(yr, j, kLog ? shifted - log_sum : math::exp(shifted) / sum);
    }
  }
}

// Softmax along a non-last axis with many columns: one thread per (outer, inner) column, walking the axis with stride
// `inner` (adjacent threads read adjacent elements).
template <typename T, bool kLog>
__global__ void softmax_strided_kernel(const T* x, T* y, std::int64_t outer, std::int64_t len, std::int64_t inner) {
  wait_for_preceding_steps();
  using C = Compute<T>;
  const std::int64_t columns = outer * inner;
  for (std::int64_t t = global_thread<std::int64_t>(); t < columns; t += grid_threads<std::int64_t>()) {
    const std::int64_t o = t / inner;
    const std::int64_t base = o * len * inner + (t - o * inner);
    C m = -math::infinity<C>();
    for (std::int64_t j = 0; j < len; ++j) m = NanMaxOp{}(m, load(x, base + j * inner));
    C sum = 0;
    for (std::int64_t j = 0; j < len; ++j) sum += math::exp(load(x, base + j * inner) - m);
    const C log_sum = kLog ? math::log(sum) : C(0);
    for (std::int64_t j = 0; j < len; ++j) {
      const C shifted = load(x, base + j * inner) - m;
      store(y, base + j * inner, kLog ? shifted - log_sum : math::exp(shifted) / sum);
    }
  }
}

// Softmax along a non-last axis with few columns: a block takes 32 adjacent columns (threadIdx.x) of one outer index
// and splits the axis among kColumnSplit rows of threads (threadIdx.y), combining through shared memory.
constexpr int kColumnTile = 32;
constexpr int kColumnSplit = 16;
constexpr std::int64_t kManyColumns = 32768;  // below this, thread-per-column leaves most of the GPU idle

template <typename C, typename Op>
__device__ __forceinline__ C column_reduce(C v, Op op, C (*partial)[kColumnTile + 1]) {
  partial[threadIdx.y][threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.y == 0) {
    for (int t = 1; t < kColumnSplit; ++t) v = op(v, partial[t][threadIdx.x]);
    partial[0][threadIdx.x] = v;
  }
  __syncthreads();
  v = partial[0][threadIdx.x];
  __syncthreads();
  return v;
}

template <typename T, bool kLog>
__global__ void softmax_columns_kernel(const T* x, T* y, std::int64_t outer, std::int64_t len, std::int64_t inner) {
  wait_for_preceding_steps();
  using C = Compute<T>;
  __shared__ C partial[kColumnSplit][kColumnTile + 1];
  const std::int64_t column = static_cast<std::int64_t>(blockIdx.x) * kColumnTile + threadIdx.x;
  const bool active = column < inner;
  for (std::int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    const std::int64_t base = o * len * inner + column;
    C m = -math::infinity<C>();
    if (active) {
      for (std::int64_t j = threadIdx.y; j < len; j += kColumnSplit) m = NanMaxOp{}(m, load(x, base + j * inner));
    }
    m = column_reduce(m, NanMaxOp{}, partial);
    C sum = 0;
    if (active) {
      for (std::int64_t j = threadIdx.y; j < len; j += kColumnSplit) sum += math::exp(load(x, base + j * inner) - m);
    }
    sum = column_reduce(sum, SumOp{}, partial);
    const C log_sum = kLog ? math::log(sum) : C(0);
    if (active) {
      for (std::int64_t j = threadIdx.y; j < len; j += kColumnSplit) {
        const C shifted = load(x, base + j * inner) - m;
        store(y, base + j * inner, kLog ? shifted - log_sum : math::exp(shifted) / sum);
      }
    }
  }
}

// Which kernel runs: a warp per row (4 or 32 values a lane), a block per row, a thread per column, or a block per
// 32 columns.
enum class SoftmaxPath { kWarp4, kWarp32, kBlock, kStrided, kColumns };

struct SoftmaxPlan {
  bool empty = false;
  DataType dtype = DataType::kF32;
  SoftmaxPath path = SoftmaxPath::kWarp4;
  dim3 grid;  // the block is the path's
  std::int64_t outer = 0, len = 0, inner = 0;
};

SoftmaxPlan prepare_softmax(const StepLaunch& launch) {
  const DeviceTensor& x = launch.inputs.at(0);
  const int rank = x.shape.rank();
  std::int64_t axis = launch.attrs->get_int("axis");
  if (rank == 0) {
    axis = 0;
  } else if (axis < 0) {
    axis += rank;
  }
  const int a = static_cast<int>(axis);
  SoftmaxPlan plan;
  plan.outer = rank == 0 ? 1 : volume(x.shape, 0, a);
  plan.len = rank == 0 ? 1 : x.shape[a];
  plan.inner = rank == 0 ? 1 : volume(x.shape, a + 1, rank);
  if (plan.outer * plan.len * plan.inner == 0) {
    plan.empty = true;
    return plan;
  }
  if (!in_list(FloatTypes{}, x.dtype)) launch.attrs->fail("unsupported dtype for the CUDA kernel");
  plan.dtype = x.dtype;
  const std::int64_t outer = plan.outer, len = plan.len, inner = plan.inner;
  if (inner == 1) {
    const std::int64_t rows = outer;
    if (len <= 128) {
      plan.path = SoftmaxPath::kWarp4;
      plan.grid = dim3(grid_for(rows, kWarpRowsThreads / 32));
    } else if (len <= kWarpRowMax) {
      plan.path = SoftmaxPath::kWarp32;
      plan.grid = dim3(grid_for(rows, kWarpRowsThreads / 32));
    } else {
      plan.path = SoftmaxPath::kBlock;
      plan.grid = dim3(grid_for(rows, 1));
    }
  } else if (outer * inner >= kManyColumns) {
    plan.path = SoftmaxPath::kStrided;
    plan.grid = dim3(grid_for(outer * inner));
  } else {
    plan.path = SoftmaxPath::kColumns;
    plan.grid = dim3(static_cast<unsigned>((inner + kColumnTile - 1) / kColumnTile),
                     static_cast<unsigned>(std::min<std::int64_t>(outer, 65535)));
  }
  return plan;
}

template <typename T, bool kLog>
void softmax_typed(const StepLaunch& launch, const SoftmaxPlan& plan) {
  const T* x = static_cast<const T*>(launch.inputs.at(0).data);
  T* y = static_cast<T*>(launch.outputs.at(0).data);
  const std::int64_t outer = plan.outer, len = plan.len, inner = plan.inner;
  switch (plan.path) {
    case SoftmaxPath::kWarp4:
      launch_kernel(launch, softmax_warp_kernel<T, 4, kLog>, plan.grid, kWarpRowsThreads, 0, x, y, outer,
                    static_cast<int>(len));
      break;
    case SoftmaxPath::kWarp32:
      launch_kernel(launch, softmax_warp_kernel<T, 32, kLog>, plan.grid, kWarpRowsThreads, 0, x, y, outer,
                    static_cast<int>(len));
      break;
    case SoftmaxPath::kBlock:
      launch_kernel(launch, softmax_block_kernel<T, kLog>, plan.grid, kBlockRowThreads, 0, x, y, outer, len);
      break;
    case SoftmaxPath::kStrided:
      launch_kernel(launch, softmax_strided_kernel<T, kLog>, plan.grid, kThreads, 0, x, y, outer, len, inner);
      break;
    case SoftmaxPath::kColumns:
      launch_kernel(launch, softmax_columns_kernel<T, kLog>, plan.grid, dim3(kColumnTile, kColumnSplit), 0, x, y, outer,
                    len, inner);
      break;
  }
}

template <bool kLog>
void launch_softmax(const StepLaunch& launch, const SoftmaxPlan& plan) {
  if (plan.empty) return;
  dispatch(FloatTypes{}, plan.dtype,
           [&](auto tag) { softmax_typed<typename decltype(tag)::type, kLog>(launch, plan); });
}

// ---- layer_norm / rms_norm over the last normalized_rank dims ----
// layer_norm: (x - mean) / sqrt(var + eps) * weight + bias (biased variance, two passes); rms_norm:
// x / sqrt(mean(x^2) + eps) * weight. An absent weight is 1 and an absent bias 0 (added, as the CPU reference does).

// The type statistics are kept in: f32 tensors use f64, so that rows with a large offset (mean much larger than the
// spread) normalize as exactly as the CPU reference, which computes in double; f16/bf16 use f32, f64 uses f64.
template <typename T>
struct NormStatOf {
  using type = Compute<T>;
};
template <>
struct NormStatOf<float> {
  using type = double;
};
template <typename T>
using NormStat = typename NormStatOf<T>::type;

// kV consecutive elements moved as one access of kV * sizeof(T) bytes (2 to 16; the launch checks the alignment).
template <typename T, int kV>
struct Pack {
  T v[kV];
};

template <typename T, int kV>
__device__ __forceinline__ Pack<T, kV> load_pack(const T* p, int vector) {
  using W = typename Word<static_cast<int>(sizeof(T)) * kV>::type;
  const W w = reinterpret_cast<const W*>(p)[vector];
  Pack<T, kV> out;
  memcpy(&out, &w, sizeof(W));
  return out;
}

template <typename T, int kV>
__device__ __forceinline__ void store_pack(T* p, int vector, const Pack<T, kV>& value) {
  using W = typename Word<static_cast<int>(sizeof(T)) * kV>::type;
  W w;
  memcpy(&w, &value, sizeof(W));
  reinterpret_cast<W*>(p)[vector] = w;
}

// Loads vector `vector` of kV elements and widens it for arithmetic (to_compute_arith): f16/bf16 pairs straight from
// the loaded words.
template <typename T, int kV, typename C>
__device__ __forceinline__ void load_widened(const T* p, int vector, C (&out)[kV]) {
  const Pack<T, kV> pack = load_pack<T, kV>(p, vector);
  if constexpr ((std::is_same_v<T, F16> || std::is_same_v<T, BF16>)&&kV % 2 == 0) {
    std::uint32_t words[kV / 2];
    memcpy(words, &pack, sizeof words);
#pragma unroll
    for (int e = 0; e < kV; e += 2) {
      float2 f;
      if constexpr (std::is_same_v<T, F16>) {
        __half2 h;
        memcpy(&h, &words[e / 2], sizeof h);
        f = __half22float2(h);
      } else {
        f = make_float2(__uint_as_float(words[e / 2] << 16), __uint_as_float(words[e / 2] & 0xFFFF0000U));
      }
      out[e] = static_cast<C>(f.x);
      out[e + 1] = static_cast<C>(f.y);
    }
  } else {
#pragma unroll
    for (int e = 0; e < kV; ++e) out[e] = static_cast<C>(to_compute_arith(pack.v[e]));
  }
}

// Rounds kV compute values to T and stores them as vector `vector`: f16/bf16 pairs with one packed conversion each.
template <typename T, int kV, typename C>
__device__ __forceinline__ void store_rounded(T* p, int vector, const C (&r)[kV]) {
  Pack<T, kV> out;
  if constexpr ((std::is_same_v<T, F16> || std::is_same_v<T, BF16>)&&kV % 2 == 0) {
    std::uint32_t pairs[kV / 2];
#pragma unroll
    for (int e = 0; e < kV; e += 2) {
      const auto lo = static_cast<float>(r[e]);
      const auto hi = static_cast<float>(r[e + 1]);
      pairs[e / 2] = std::is_same_v<T, F16> ? f16x2_bits(lo, hi) : bf16x2_bits(lo, hi);
    }
    memcpy(&out, pairs, sizeof out);
  } else {
#pragma unroll
    for (int e = 0; e < kV; ++e) out.v[e] = from_compute<T>(static_cast<Compute<T>>(r[e]));
  }
  store_pack<T, kV>(p, vector, out);
}

// Sum over the kGroup threads of a row (kGroup lanes of one warp), or over the whole block when kGroup is 0.
template <int kGroup, typename C>
__device__ __forceinline__ C row_sum(C v, C* scratch) {
  if constexpr (kGroup == 0) {
    return block_reduce(v, SumOp{}, C(0), scratch);
  } else {
#pragma unroll
    for (int offset = kGroup / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xFFFFFFFFU, v, offset);
    return v;
  }
}

// The second result of a layer_norm with `quantize_to`: the normalized values quantized (Q: std::int8_t or F8E4M3) by
// one scale, from the compute value rather than its rounding to T. Q = NoQuantized: none.
struct NoQuantized {};
template <typename Q>
struct QuantizedOut {
  const float* scale = nullptr;
  Q* y = nullptr;
};

// A row held in registers: kGroup lanes of a warp per row (a block holds blockDim.x / kGroup rows), or the whole
// block per row when kGroup is 0. Each thread keeps up to kPer vectors of kV elements (vector t, t + threads,
// ...), so x is read once; the statistics are taken from the registers (two passes for layer_norm) and the row is
// written with the same vectors. Requires len % kV == 0 and len <= kPer * kV * threads per row.
template <typename T, int kV, int kPer, int kGroup, bool kRms, typename Q = NoQuantized>
__global__ void __launch_bounds__(kGroup == 0 ? kBlockRowThreads : kWarpRowsThreads)
    norm_rows_kernel(const T* x, const T* weight, const T* bias, T* y, std::int64_t rows, int len, float eps_f,
                     double eps_d, QuantizedOut<Q> quantized) {
  wait_for_preceding_steps();
  const int vectors = len / kV;
  const int threads = kGroup == 0 ? static_cast<int>(blockDim.x) : kGroup;
  const int t = kGroup == 0 ? static_cast<int>(threadIdx.x) : static_cast<int>(threadIdx.x) % kGroup;
  using C = NormStat<T>;
  constexpr bool kQuantized = !std::is_same_v<Q, NoQuantized>;
  __shared__ C scratch[32];
  const C eps = param_as<C>(eps_f, eps_d);
  const float quantized_reciprocal = kQuantized ? __frcp_rn(*quantized.scale) : 1.0F;
  const C n = static_cast<C>(len);
  const std::int64_t rows_per_block = kGroup == 0 ? 1 : static_cast<std::int64_t>(blockDim.x / kGroup);
  const std::int64_t sub_row = kGroup == 0 ? 0 : static_cast<std::int64_t>(threadIdx.x / kGroup);
  // The loop bound only depends on the block, so every thread of a warp (block) reaches the shuffles (barriers).
  for (std::int64_t first = blockIdx.x * rows_per_block; first < rows; first += gridDim.x * rows_per_block) {
    const std::int64_t row = first + sub_row;
    const bool active = row < rows;
    const T* xr = x + (active ? row : 0) * len;
    T* yr = y + (active ? row : 0) * len;
    C v[kPer][kV];
    C sum = 0;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int vi = t + k * threads;
      if (active && vi < vectors) {
        load_widened<T, kV>(xr, vi, v[k]);
#pragma unroll
        for (int e = 0; e < kV; ++e) sum += kRms ? v[k][e] * v[k][e] : v[k][e];
      } else {
#pragma unroll
        for (int e = 0; e < kV; ++e) v[k][e] = C(0);
      }
    }
    sum = row_sum<kGroup>(sum, scratch);
    C mean = 0;
    C denom = 0;
    if (kRms) {
      denom = math::sqrt(sum / n + eps);
    } else {
      mean = sum / n;
      C sq = 0;
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        if (active && t + k * threads < vectors) {
#pragma unroll
          for (int e = 0; e < kV; ++e) {
            const C d = v[k][e] - mean;
            sq += d * d;
          }
        }
      }
      sq = row_sum<kGroup>(sq, scratch);
      denom = math::sqrt(sq / n + eps);
    }
    // One division per row: each element is scaled by (1 / denom) * weight. That is a rounding more than the CPU
    // reference's x / denom * weight, in statistics wider than f32/f16/bf16 tensors (the results round alike), and a
    // last-bit difference for f64. The divisions were most of this kernel's instructions.
    const C inv = C(1) / denom;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int vi = t + k * threads;
      if (active && vi < vectors) {
        C w[kV];
        C b[kV];
#pragma unroll
        for (int e = 0; e < kV; ++e) {
          w[e] = C(1);
          b[e] = C(0);
        }
        if (weight != nullptr) load_widened<T, kV>(weight, vi, w);
        if (!kRms && bias != nullptr) load_widened<T, kV>(bias, vi, b);
        C r[kV];
#pragma unroll
        for (int e = 0; e < kV; ++e) {
          const C scale = inv * w[e];
          r[e] = kRms ? v[k][e] * scale : (v[k][e] - mean) * scale + b[e];
        }
        store_rounded<T, kV>(yr, vi, r);
        if constexpr (kQuantized) {
          Pack<Q, kV> q;
#pragma unroll
          for (int e = 0; e < kV; ++e) q.v[e] = quantize_result<Q>(static_cast<float>(r[e]), quantized_reciprocal);
          store_pack<Q, kV>(quantized.y + (active ? row : 0) * len, vi, q);
        }
      }
    }
  }
}

template <typename T, bool kRms, typename Q = NoQuantized>
__global__ void norm_block_kernel(const T* x, const T* weight, const T* bias, T* y, std::int64_t rows, std::int64_t len,
                                  float eps_f, double eps_d, QuantizedOut<Q> quantized) {
  wait_for_preceding_steps();
  using C = NormStat<T>;
  constexpr bool kQuantized = !std::is_same_v<Q, NoQuantized>;
  __shared__ C scratch[32];
  const C eps = param_as<C>(eps_f, eps_d);
  const C n = static_cast<C>(len);
  const float quantized_reciprocal = kQuantized ? __frcp_rn(*quantized.scale) : 1.0F;
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * len;
    T* yr = y + row * len;
    C sum = 0;
    for (std::int64_t j = threadIdx.x; j < len; j += blockDim.x) {
      const C v = load(xr, j);
      sum += kRms ? v * v : v;
    }
    sum = block_reduce(sum, SumOp{}, C(0), scratch);
    C mean = 0;
    C denom = 0;
    if (kRms) {
      denom = math::sqrt(sum / n + eps);
    } else {
      mean = sum / n;
      C sq = 0;
      for (std::int64_t j = threadIdx.x; j < len; j += blockDim.x) {
        const C d = load(xr, j) - mean;
        sq += d * d;
      }
      sq = block_reduce(sq, SumOp{}, C(0), scratch);
      denom = math::sqrt(sq / n + eps);
    }
    for (std::int64_t j = threadIdx.x; j < len; j += blockDim.x) {
      const C w = load_or(weight, j, C(1));
      const C r = kRms ? load(xr, j) / denom * w : (load(xr, j) - mean) / denom * w + load_or(bias, j, C(0));
      store(yr, j, r);
      if constexpr (kQuantized)
        quantized.y[row * len + j] = quantize_result<Q>(static_cast<float>(r), quantized_reciprocal);
    }
  }
}

// Each thread keeps at most 32 values of a row in registers (16 when the statistics are in f64): rows of up to 8 such
// loads take 8 lanes, up to 32 a warp, up to 512 a block; longer rows take norm_block_kernel, which reads x three
// times.
template <typename T>
constexpr int kRowRegisters = std::is_same_v<NormStat<T>, double> ? 16 : 32;

// Which kernel holds a row of kV-element vectors: norm_rows_kernel with 8 lanes, a warp or a block of `threads` per
// row, else norm_block_kernel.
enum class RowsPath { kLanes8, kWarp, kBlockRow, kLongRow };

struct RowsLaunch {
  RowsPath path = RowsPath::kLanes8;
  unsigned grid = 1;
  int threads = kWarpRowsThreads;
};

template <typename T, int kV>
RowsLaunch plan_norm_rows(std::int64_t rows, std::int64_t len) {
  constexpr int kPer = kRowRegisters<T> / kV;  // vectors per thread
  const std::int64_t vectors = len / kV;
  if (vectors <= 8 * kPer) return {RowsPath::kLanes8, grid_for(rows, kWarpRowsThreads / 8), kWarpRowsThreads};
  if (vectors <= 32 * kPer) return {RowsPath::kWarp, grid_for(rows, kWarpRowsThreads / 32), kWarpRowsThreads};
  if (vectors <= kBlockRowThreads * kPer) {
    // The fewest threads (a multiple of 32) that hold the row.
    const std::int64_t needed = (vectors + kPer - 1) / kPer;
    const int threads = static_cast<int>(std::max<std::int64_t>(128, (needed + 31) / 32 * 32));
    return {RowsPath::kBlockRow, grid_for(rows, 1), threads};
  }
  return {RowsPath::kLongRow, grid_for(rows, 1), kBlockRowThreads};
}

// The elements of T in a 16-byte vector.
template <typename T>
constexpr int kNormVector = 16 / static_cast<int>(sizeof(T));

struct LastDimsNormPlan {
  bool empty = false;
  DataType dtype = DataType::kF32;
  double eps = 0;
  float eps_f = 0;
  std::int64_t rows = 0, len = 0;
  bool whole_vectors = false;           // len is a multiple of the 16-byte vector (the addresses are tested at launch)
  RowsLaunch vector_rows;               // in 16-byte vectors
  RowsLaunch scalar_rows;               // one element at a time
  DataType quantized = DataType::kF32;  // `quantize_to` (i8 or f8e4m3), else f32: none
};

template <bool kRms>
LastDimsNormPlan prepare_last_dims_norm(const StepLaunch& launch) {
  const DeviceTensor& x = launch.inputs.at(0);
  const int rank = x.shape.rank();
  const double eps = launch.attrs->get_float("epsilon", kRms ? 1e-6 : 1e-5);
  const auto normalized = static_cast<int>(launch.attrs->get_int("normalized_rank", 1));
  const std::int64_t len = volume(x.shape, rank - normalized, rank);
  const std::int64_t total = volume(x.shape);
  LastDimsNormPlan plan;
  if (len == 0 || total == 0) {
    plan.empty = true;
    return plan;
  }
  plan.dtype = x.dtype;
  plan.eps = eps;
  plan.eps_f = host_double_to_float(eps);
  plan.rows = total / len;
  plan.len = len;
  if (launch.outputs.size() > 1) plan.quantized = launch.outputs[1].dtype;
  const bool handled = dispatch(FloatTypes{}, x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    plan.whole_vectors = len % kNormVector<T> == 0;
    plan.vector_rows = plan_norm_rows<T, kNormVector<T>>(plan.rows, len);
    plan.scalar_rows = plan_norm_rows<T, 1>(plan.rows, len);
  });
  if (!handled) launch.attrs->fail("unsupported dtype for the CUDA kernel");
  return plan;
}

template <typename T, int kV, bool kRms, typename Q>
void launch_norm_rows(const T* x, const T* weight, const T* bias, T* y, QuantizedOut<Q> quantized,
                      const LastDimsNormPlan& plan, const RowsLaunch& rows_launch, const StepLaunch& launch) {
  constexpr int kPer = kRowRegisters<T> / kV;  // vectors per thread
  const std::int64_t rows = plan.rows;
  const auto len = static_cast<int>(plan.len);
  const unsigned grid = rows_launch.grid;
  const int threads = rows_launch.threads;
  switch (rows_launch.path) {
    case RowsPath::kLanes8:
      launch_kernel(launch, norm_rows_kernel<T, kV, kPer, 8, kRms, Q>, grid, threads, 0, x, weight, bias, y, rows, len,
                    plan.eps_f, plan.eps, quantized);
      break;
    case RowsPath::kWarp:
      launch_kernel(launch, norm_rows_kernel<T, kV, kPer, 32, kRms, Q>, grid, threads, 0, x, weight, bias, y, rows, len,
                    plan.eps_f, plan.eps, quantized);
      break;
    case RowsPath::kBlockRow:
      launch_kernel(launch, norm_rows_kernel<T, kV, kPer, 0, kRms, Q>, grid, threads, 0, x, weight, bias, y, rows, len,
                    plan.eps_f, plan.eps, quantized);
      break;
    case RowsPath::kLongRow:
      launch_kernel(launch, norm_block_kernel<T, kRms, Q>, grid, threads, 0, x, weight, bias, y, rows, plan.len,
                    plan.eps_f, plan.eps, quantized);
      break;
  }
}

// Q: NoQuantized, or the type of layer_norm's second (quantized) output.
template <typename T, bool kRms, typename Q>
void launch_last_dims_norm_typed(const StepLaunch& launch, const LastDimsNormPlan& plan) {
  const void* weight = launch.inputs.size() > 1 ? launch.inputs[1].data : nullptr;
  const void* bias = !kRms && launch.inputs.size() > 2 ? launch.inputs[2].data : nullptr;
  const T* xp = static_cast<const T*>(launch.inputs.at(0).data);
  const T* wp = static_cast<const T*>(weight);
  const T* bp = static_cast<const T*>(bias);
  T* yp = static_cast<T*>(launch.outputs.at(0).data);
  QuantizedOut<Q> quantized;
  if constexpr (!std::is_same_v<Q, NoQuantized>) {
    quantized.scale = static_cast<const float*>(launch.inputs.at(kRms ? 2 : 3).data);  // output_scale
    quantized.y = static_cast<Q*>(launch.outputs.at(1).data);
  }
  // 16-byte vectors when the row length and every pointer allow it (the quantized output's vectors are
  // kNormVector<T> bytes), else one element at a time.
  const bool vector = plan.whole_vectors && pointer_alignment(xp, 16) == 16 && pointer_alignment(yp, 16) == 16 &&
                      (wp == nullptr || pointer_alignment(wp, 16) == 16) &&
                      (bp == nullptr || pointer_alignment(bp, 16) == 16) &&
                      (quantized.y == nullptr || pointer_alignment(quantized.y, kNormVector<T>) >= kNormVector<T>);
  if (vector) {
    launch_norm_rows<T, kNormVector<T>, kRms>(xp, wp, bp, yp, quantized, plan, plan.vector_rows, launch);
  } else {
    launch_norm_rows<T, 1, kRms>(xp, wp, bp, yp, quantized, plan, plan.scalar_rows, launch);
  }
}

template <bool kRms>
void launch_last_dims_norm(const StepLaunch& launch, const LastDimsNormPlan& plan) {
  if (plan.empty) return;
  dispatch(FloatTypes{}, plan.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    switch (plan.quantized) {
      case DataType::kI8: launch_last_dims_norm_typed<T, kRms, std::int8_t>(launch, plan); break;
      case DataType::kF8E4M3: launch_last_dims_norm_typed<T, kRms, F8E4M3>(launch, plan); break;
      default: launch_last_dims_norm_typed<T, kRms, NoQuantized>(launch, plan); break;
    }
  });
}

// ---- batch_norm (inference): x [N, C, ...], per-channel statistics as inputs ----

template <typename T, typename Index>
__global__ void batch_norm_kernel(const T* x, const T* mean, const T* var, const T* weight, const T* bias, T* y,
                                  Index n, Index channels, Index spatial, float eps_f, double eps_d) {
  wait_for_preceding_steps();
  using C = Compute<T>;
  const C eps = param_as<C>(eps_f, eps_d);
  for (Index i = global_thread<Index>(); i < n; i += grid_threads<Index>()) {
    const Index c = (i / spatial) % channels;
    const C v = (load(x, i) - load(mean, c)) / math::sqrt(load(var, c) + eps) * load_or(weight, c, C(1)) +
                load_or(bias, c, C(0));
    store(y, i, v);
  }
}

struct BatchNormPlan {
  bool empty = false;
  DataType dtype = DataType::kF32;
  double eps = 0;
  float eps_f = 0;
  std::int64_t n = 0, channels = 0, spatial = 0;
  bool index32 = true;
  unsigned grid = 1;
};

BatchNormPlan prepare_batch_norm(const StepLaunch& launch) {
  const DeviceTensor& x = launch.inputs.at(0);
  const double eps = launch.attrs->get_float("epsilon", 1e-5);
  BatchNormPlan plan;
  plan.n = volume(x.shape);
  if (plan.n == 0) {
    plan.empty = true;
    return plan;
  }
  plan.channels = x.shape[1];
  plan.spatial = volume(x.shape, 2, x.shape.rank());
  plan.eps = eps;
  plan.eps_f = host_double_to_float(eps);
  if (!in_list(FloatTypes{}, x.dtype)) launch.attrs->fail("unsupported dtype for the CUDA kernel");
  plan.dtype = x.dtype;
  plan.index32 = fits_index32(plan.n);
  plan.grid = grid_for(plan.n);
  return plan;
}

void launch_batch_norm(const StepLaunch& launch, const BatchNormPlan& plan) {
  if (plan.empty) return;
  const void* weight = launch.inputs.size() > 3 ? launch.inputs[3].data : nullptr;
  const void* bias = launch.inputs.size() > 4 ? launch.inputs[4].data : nullptr;
  dispatch(FloatTypes{}, plan.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto run = [&](auto index) {
      using Index = decltype(index);
      launch_kernel(launch, batch_norm_kernel<T, Index>, plan.grid, kThreads, 0,
                    static_cast<const T*>(launch.inputs.at(0).data), static_cast<const T*>(launch.inputs.at(1).data),
                    static_cast<const T*>(launch.inputs.at(2).data), static_cast<const T*>(weight),
                    static_cast<const T*>(bias), static_cast<T*>(launch.outputs.at(0).data), static_cast<Index>(plan.n),
                    static_cast<Index>(plan.channels), static_cast<Index>(plan.spatial), plan.eps_f, plan.eps);
    };
    if (plan.index32) {
      run(std::int32_t{0});
    } else {
      run(std::int64_t{0});
    }
  });
}

// ---- group_norm / instance_norm: one block per contiguous (n, group) block of channels x spatial positions ----

template <typename T>
__global__ void grouped_norm_kernel(const T* x, const T* weight, const T* bias, T* y, std::int64_t blocks,
                                    std::int64_t block_len, std::int64_t channels, std::int64_t spatial, float eps_f,
                                    double eps_d) {
  wait_for_preceding_steps();
  using C = Compute<T>;
  __shared__ C scratch[32];
  const C eps = param_as<C>(eps_f, eps_d);
  const C n = static_cast<C>(block_len);
  for (std::int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const std::int64_t start = b * block_len;
    C sum = 0;
    for (std::int64_t j = threadIdx.x; j < block_len; j += blockDim.x) sum += load(x, start + j);
    const C mean = block_reduce(sum, SumOp{}, C(0), scratch) / n;
    C sq = 0;
    for (std::int64_t j = threadIdx.x; j < block_len; j += blockDim.x) {
      const C d = load(x, start + j) - mean;
      sq += d * d;
    }
    const C denom = math::sqrt(block_reduce(sq, SumOp{}, C(0), scratch) / n + eps);
    for (std::int64_t j = threadIdx.x; j < block_len; j += blockDim.x) {
      const std::int64_t i = start + j;
      const std::int64_t c = (i / spatial) % channels;
      store(y, i, (load(x, i) - mean) / denom * load_or(weight, c, C(1)) + load_or(bias, c, C(0)));
    }
  }
}

struct GroupedNormPlan {
  bool empty = false;
  DataType dtype = DataType::kF32;
  double eps = 0;
  float eps_f = 0;
  std::int64_t blocks = 0, block_len = 0, channels = 0, spatial = 0;
  unsigned grid = 1;
};

template <bool kInstance>
GroupedNormPlan prepare_grouped_norm(const StepLaunch& launch) {
  const DeviceTensor& x = launch.inputs.at(0);
  const double eps = launch.attrs->get_float("epsilon", 1e-5);
  const std::int64_t channels = x.shape[1];
  const std::int64_t groups = kInstance ? channels : launch.attrs->get_int("num_groups");
  const std::int64_t spatial = volume(x.shape, 2, x.shape.rank());
  const std::int64_t total = volume(x.shape);
  const std::int64_t block_len = groups == 0 ? 0 : channels / groups * spatial;
  GroupedNormPlan plan;
  if (block_len == 0 || total == 0) {
    plan.empty = true;
    return plan;
  }
  if (!in_list(FloatTypes{}, x.dtype)) launch.attrs->fail("unsupported dtype for the CUDA kernel");
  plan.dtype = x.dtype;
  plan.eps = eps;
  plan.eps_f = host_double_to_float(eps);
  plan.blocks = total / block_len;
  plan.block_len = block_len;
  plan.channels = channels;
  plan.spatial = spatial;
  plan.grid = grid_for(plan.blocks, 1);
  return plan;
}

void launch_grouped_norm(const StepLaunch& launch, const GroupedNormPlan& plan) {
  if (plan.empty) return;
  const void* weight = launch.inputs.size() > 1 ? launch.inputs[1].data : nullptr;
  const void* bias = launch.inputs.size() > 2 ? launch.inputs[2].data : nullptr;
  dispatch(FloatTypes{}, plan.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_kernel(launch, grouped_norm_kernel<T>, plan.grid, kBlockRowThreads, 0,
                  static_cast<const T*>(launch.inputs.at(0).data), static_cast<const T*>(weight),
                  static_cast<const T*>(bias), static_cast<T*>(launch.outputs.at(0).data), plan.blocks, plan.block_len,
                  plan.channels, plan.spatial, plan.eps_f, plan.eps);
  });
}

// ---- supports ----

// x has the entry's dtype and every present parameter has it too (the op definitions require that already; a
// layer_norm's output scale, input 3 (rms_norm's, input 2), is f32 and its quantized second output i8 or f8e4m3).
template <DataType kDtype>
bool supports_float(const graph::Graph& graph, const graph::Layer& layer, Precision /*precision*/) {
  if (layer.inputs.empty() || !has_tensor(layer, 0) || input_dtype(graph, layer, 0) != kDtype) return false;
  for (std::size_t i = 1; i < layer.inputs.size(); ++i) {
    if ((layer.op == "layer_norm" && i == 3) || (layer.op == "rms_norm" && i == 2)) continue;  // output_scale
    if (has_tensor(layer, i) && input_dtype(graph, layer, i) != kDtype) return false;
  }
  return output_dtype(graph, layer, 0) == kDtype;
}

}  // namespace

// The entries of an op for the four float dtypes (f16/bf16 accumulate in f32, f64 in f64).
// clang-format off
#define TENSORACLE_NORM_ENTRIES(OP, VARIANT, PREPARE, LAUNCH)                                        \
  prepared_kernel<PREPARE, LAUNCH>(OP "_f32_" VARIANT, OP, supports_float<DataType::kF32>),          \
  prepared_kernel<PREPARE, LAUNCH>(OP "_f16_f32acc_" VARIANT, OP, supports_float<DataType::kF16>),   \
  prepared_kernel<PREPARE, LAUNCH>(OP "_bf16_f32acc_" VARIANT, OP, supports_float<DataType::kBF16>), \
  prepared_kernel<PREPARE, LAUNCH>(OP "_f64_" VARIANT, OP, supports_float<DataType::kF64>)
// clang-format on

void register_normalization_kernels(std::vector<KernelEntry>& kernels) {
  const std::vector<KernelEntry> entries = {
      // last axis: a warp per row up to 1024 elements, else a block per row; other axes: a thread per column, or a
      // block per 32 columns when there are few
      TENSORACLE_NORM_ENTRIES("softmax", "rowwise", prepare_softmax, launch_softmax<false>),
      TENSORACLE_NORM_ENTRIES("log_softmax", "rowwise", prepare_softmax, launch_softmax<true>),
      // rows held in registers (8 lanes, a warp or a block per row, 16-byte loads where aligned), else a block per
      // row reading x three times
      TENSORACLE_NORM_ENTRIES("layer_norm", "rowwise", prepare_last_dims_norm<false>, launch_last_dims_norm<false>),
      TENSORACLE_NORM_ENTRIES("rms_norm", "rowwise", prepare_last_dims_norm<true>, launch_last_dims_norm<true>),
      TENSORACLE_NORM_ENTRIES("batch_norm", "elementwise", prepare_batch_norm, launch_batch_norm),
      TENSORACLE_NORM_ENTRIES("group_norm", "block", prepare_grouped_norm<false>, launch_grouped_norm),
      TENSORACLE_NORM_ENTRIES("instance_norm", "block", prepare_grouped_norm<true>, launch_grouped_norm),
  };
  kernels.insert(kernels.end(), entries.begin(), entries.end());
}

#undef TENSORACLE_NORM_ENTRIES

}  // namespace tensoracle::cuda
