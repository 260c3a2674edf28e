// CUDA kernels of the data_movement family (reshape, transpose, slice, concat, split, gather, expand, pad), any dtype.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cuda/cuda_step.hpp"
#include "backends/cuda/kernels/common.cuh"

namespace tensoracle::cuda {
namespace {

using namespace kernels;  // NOLINT(google-build-using-namespace): the shared helpers of this backend's kernels

std::int64_t normalize_axis(std::int64_t axis, int rank) { return axis < 0 ? axis + rank : axis; }

// The widest word (16, 8, 4, 2 or 1 bytes) dividing every byte count and address given.
std::size_t widest_word(std::initializer_list<std::int64_t> byte_counts, std::initializer_list<const void*> pointers) {
  std::size_t word = 16;
  auto fits = [&](std::size_t w) {
    for (std::int64_t b : byte_counts) {
      if (b % static_cast<std::int64_t>(w) != 0) return false;
    }
    for (const void* p : pointers) {
      if (reinterpret_cast<std::uintptr_t>(p) % w != 0) return false;
    }
    return true;
  };
  while (word > 1 && !fits(word)) word /= 2;
  return word;
}

void copy_bytes(const StepLaunch& launch, void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0 || dst == src) return;
  TENSORACLE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, launch.stream), layer_name(launch));
}

// ---- reshape, squeeze, unsqueeze: the row-major element order is unchanged ----

void launch_same_order(const StepLaunch& launch) {
  const DeviceTensor& x = launch.inputs.at(0);
  const DeviceTensor& out = launch.outputs.at(0);
  const std::int64_t n = volume(out.shape);
  if (n != volume(x.shape)) launch.attrs->fail("internal error: the output holds a different number of elements");
  copy_bytes(launch, out.data, x.data, static_cast<std::size_t>(n) * element_size(out.dtype));
}

// ---- strided gathers: transpose, slice, expand ----
// out[i] = in[base + offsets(i)] with per-axis input strides (negative for backward slices, 0 for broadcast axes).

template <typename W, typename Index>
__global__ void strided_copy_kernel(const W* in, W* out, Index n, Index base, Indexer<Index, 1> ix) {
  for (Index i = global_thread<Index>(); i < n; i += grid_threads<Index>()) {
    Index off[1];
    ix.offsets(i, off);
    out[i] = in[base + off[0]];
  }
}

// `strides` are per output axis, in elements of the input; `input_elements` bounds every offset.
void launch_strided_copy(const StepLaunch& launch, const std::vector<std::int64_t>& strides, std::int64_t base,
                         std::int64_t input_elements) {
  const DeviceTensor& x = launch.inputs.at(0);
  const DeviceTensor& out = launch.outputs.at(0);
  const std::int64_t n = volume(out.shape);
  if (n == 0) return;
  StridePlan<1> plan;
  if (!make_stride_plan<1>(out.shape.values(), {strides}, plan)) {
    launch.attrs->fail("the CUDA kernel handles at most 8 axes that can't be merged");
  }
  const bool handled = dispatch_element_word(element_size(out.dtype), [&](auto tag) {
    using W = typename decltype(tag)::type;
    with_indexer(plan, std::max(n, input_elements), [&](const auto& ix) {
      using Index = std::decay_t<decltype(ix.dims[0])>;
      strided_copy_kernel<W, Index>
          <<<grid_for(n), kThreads, 0, launch.stream>>>(static_cast<const W*>(x.data), static_cast<W*>(out.data),
                                                        static_cast<Index>(n), static_cast<Index>(base), ix);
      check_launch(launch);
    });
  });
  if (!handled) launch.attrs->fail("unsupported element size for the CUDA kernel");
}

void launch_transpose(const StepLaunch& launch) {
  const DeviceTensor& x = launch.inputs.at(0);
  const auto perm = launch.attrs->get_ints("perm");
  const auto in_strides = row_major_strides(x.shape);
  std::vector<std::int64_t> strides;  // input stride of each output axis
  for (auto p : perm) strides.push_back(in_strides.at(static_cast<std::size_t>(normalize_axis(p, x.shape.rank()))));
  launch_strided_copy(launch, strides, 0, volume(x.shape));
}

// ONNX slicing as the CPU reference resolves it: a negative start counts from the end, then it is clamped to [0, d]
// (step > 0) or [0, d - 1] (step < 0); the output shape gives the count.
void launch_slice(const StepLaunch& launch) {
  const DeviceTensor& x = launch.inputs.at(0);
  const DeviceTensor& out = launch.outputs.at(0);
  const int rank = x.shape.rank();
  const auto starts = launch.attrs->get_ints("starts");
  auto axes = launch.attrs->get_ints("axes", std::vector<std::int64_t>{});
  auto steps = launch.attrs->get_ints("steps", std::vector<std::int64_t>{});
  if (axes.empty()) {
    for (std::size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<std::int64_t>(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  std::vector<std::int64_t> first(static_cast<std::size_t>(rank), 0), step(static_cast<std::size_t>(rank), 1);
  for (std::size_t i = 0; i < axes.size(); ++i) {
    const auto a = static_cast<std::size_t>(normalize_axis(axes[i], rank));
    const std::int64_t d = x.shape[static_cast<int>(a)];
    std::int64_t s = starts[i] < 0 ? starts[i] + d : starts[i];
    s = steps[i] > 0 ? std::clamp<std::int64_t>(s, 0, d) : std::min<std::int64_t>(std::max<std::int64_t>(s, 0), d - 1);
    first[a] = s;
    step[a] = steps[i];
  }
  const auto in_strides = row_major_strides(x.shape);
  std::int64_t base = 0;
  std::vector<std::int64_t> strides(static_cast<std::size_t>(rank), 0);
  for (int a = 0; a < rank; ++a) {
    const auto ua = static_cast<std::size_t>(a);
    // An axis of one output element only contributes its first index (its step may be huge).
    if (out.shape[a] > 1) strides[ua] = step[ua] * in_strides[ua];
    if (out.shape[a] > 0) base += first[ua] * in_strides[ua];
  }
  launch_strided_copy(launch, strides, base, volume(x.shape));
}

void launch_expand(const StepLaunch& launch) {
  const DeviceTensor& x = launch.inputs.at(0);
  launch_strided_copy(launch, broadcast_strides(x.shape, launch.outputs.at(0).shape), 0, volume(x.shape));
}

// ---- concat and split: runs of rows copied between pitched layouts ----

template <typename W, typename Index>
__global__ void copy_rows_kernel(const W* src, W* dst, Index rows, Index width, Index src_pitch, Index dst_pitch) {
  const Index n = rows * width;
  for (Index i = global_thread<Index>(); i < n; i += grid_threads<Index>()) {
    const Index r = i / width;
    const Index j = i - r * width;
    dst[r * dst_pitch + j] = src[r * src_pitch + j];
  }
}

// Copies `rows` runs of `width` elements (of `element` bytes) from src (rows `src_pitch` apart) to dst (rows
// `dst_pitch` apart).
void copy_rows(const StepLaunch& launch, const void* src, void* dst, std::int64_t rows, std::int64_t width,
               std::int64_t src_pitch, std::int64_t dst_pitch, std::size_t element) {
  if (rows == 0 || width == 0) return;
  const auto e = static_cast<std::int64_t>(element);
  if (rows == 1 || (src_pitch == width && dst_pitch == width)) {
    copy_bytes(launch, dst, src, static_cast<std::size_t>(rows * width * e));
    return;
  }
  const std::size_t word = widest_word({width * e, src_pitch * e, dst_pitch * e}, {src, dst});
  const auto w = static_cast<std::int64_t>(word);
  const std::int64_t width_w = width * e / w, src_pitch_w = src_pitch * e / w, dst_pitch_w = dst_pitch * e / w;
  const std::int64_t extent = std::max({rows * width_w, rows * src_pitch_w, rows * dst_pitch_w});
  dispatch_word(word, [&](auto tag) {
    using W = typename decltype(tag)::type;
    if (fits_index32(extent)) {
      copy_rows_kernel<W, std::int32_t><<<grid_for(rows * width_w), kThreads, 0, launch.stream>>>(
          static_cast<const W*>(src), static_cast<W*>(dst), static_cast<std::int32_t>(rows),
          static_cast<std::int32_t>(width_w), static_cast<std::int32_t>(src_pitch_w),
          static_cast<std::int32_t>(dst_pitch_w));
    } else {
      copy_rows_kernel<W, std::int64_t><<<grid_for(rows * width_w), kThreads, 0, launch.stream>>>(
          static_cast<const W*>(src), static_cast<W*>(dst), rows, width_w, src_pitch_w, dst_pitch_w);
    }
    check_launch(launch);
  });
}

void launch_concat(const StepLaunch& launch) {
  const DeviceTensor& out = launch.outputs.at(0);
  const int rank = out.shape.rank();
  const auto axis = static_cast<int>(normalize_axis(launch.attrs->get_int("axis"), rank));
  const std::int64_t outer = volume(out.shape, 0, axis);
  const std::int64_t inner = volume(out.shape, axis + 1, rank);
  const std::int64_t block = out.shape[axis] * inner;
  const std::size_t element = element_size(out.dtype);
  std::int64_t offset = 0;  // elements of one output block written so far
  for (const DeviceTensor& x : launch.inputs) {
    const std::int64_t run = x.shape[axis] * inner;
    copy_rows(launch, x.data, static_cast<std::byte*>(out.data) + offset * static_cast<std::int64_t>(element), outer,
              run, run, block, element);
    offset += run;
  }
}

void launch_split(const StepLaunch& launch) {
  const DeviceTensor& x = launch.inputs.at(0);
  const int rank = x.shape.rank();
  const auto axis = static_cast<int>(normalize_axis(launch.attrs->get_int("axis"), rank));
  const std::int64_t outer = volume(x.shape, 0, axis);
  const std::int64_t inner = volume(x.shape, axis + 1, rank);
  const std::int64_t block = x.shape[axis] * inner;
  const std::size_t element = element_size(x.dtype);
  std::int64_t offset = 0;
  for (const DeviceTensor& out : launch.outputs) {
    const std::int64_t run = out.shape[axis] * inner;
    copy_rows(launch, static_cast<const std::byte*>(x.data) + offset * static_cast<std::int64_t>(element), out.data,
              outer, run, block, run, element);
    offset += run;
  }
}

// ---- gather ----
// out [outer, count, inner] takes data [outer, dim, inner] at indices (count of them, i32 or i64); a negative index
// counts from the end. The CPU reference rejects an index outside [-dim, dim) before writing anything; a kernel can't
// report it, so such an index yields zero bytes (never a read outside data).

template <typename W, typename I, typename Index>
__global__ void gather_kernel(const W* data, const I* indices, W* out, Index n, Index count, Index inner_w, Index dim) {
  for (Index i = global_thread<Index>(); i < n; i += grid_threads<Index>()) {
    const Index j = i % inner_w;
    const Index t = i / inner_w;
    const Index p = t % count;
    const Index o = t / count;
    std::int64_t index = static_cast<std::int64_t>(indices[p]);
    if (index < 0) index += dim;
    if (index < 0 || index >= dim) {
      out[i] = W{};
    } else {
      out[i] = data[(o * dim + static_cast<Index>(index)) * inner_w + j];
    }
  }
}

void launch_gather(const StepLaunch& launch) {
  const DeviceTensor& data = launch.inputs.at(0);
  const DeviceTensor& indices = launch.inputs.at(1);
  const DeviceTensor& out = launch.outputs.at(0);
  const int rank = data.shape.rank();
  const auto axis = static_cast<int>(normalize_axis(launch.attrs->get_int("axis", 0), rank));
  const std::int64_t dim = data.shape[axis];
  const std::int64_t outer = volume(data.shape, 0, axis);
  const std::int64_t inner = volume(data.shape, axis + 1, rank);
  const std::int64_t count = volume(indices.shape);
  if (outer == 0 || inner == 0 || count == 0) return;
  const auto e = static_cast<std::int64_t>(element_size(data.dtype));
  // Rows of `inner` elements move as whole words where the row size and both pointers allow.
  const std::size_t word = widest_word({inner * e}, {data.data, out.data});
  const std::int64_t inner_w = inner * e / static_cast<std::int64_t>(word);
  const std::int64_t n = outer * count * inner_w;
  const std::int64_t extent = std::max(n, outer * dim * inner_w);
  bool handled = false;
  dispatch_word(word, [&](auto word_tag) {
    using W = typename decltype(word_tag)::type;
    handled = dispatch(TypeList<std::int32_t, std::int64_t>{}, indices.dtype, [&](auto index_tag) {
      using I = typename decltype(index_tag)::type;
      if (fits_index32(extent)) {
        gather_kernel<W, I, std::int32_t><<<grid_for(n), kThreads, 0, launch.stream>>>(
            static_cast<const W*>(data.data), static_cast<const I*>(indices.data), static_cast<W*>(out.data),
            static_cast<std::int32_t>(n), static_cast<std::int32_t>(count), static_cast<std::int32_t>(inner_w),
            static_cast<std::int32_t>(dim));
      } else {
        gather_kernel<W, I, std::int64_t><<<grid_for(n), kThreads, 0, launch.stream>>>(
            static_cast<const W*>(data.data), static_cast<const I*>(indices.data), static_cast<W*>(out.data), n, count,
            inner_w, dim);
      }
      check_launch(launch);
    });
  });
  if (!handled) launch.attrs->fail("unsupported indices dtype for the CUDA kernel");
}

// ---- pad ----
// Each output element reads input index c - begin per axis; outside [0, d) it is the fill value (constant), the
// clamped index (edge) or the index reflected about the edge elements (reflect; pads < d, checked by the shape
// function).

enum class PadMode : int { kConstant, kReflect, kEdge };

template <typename Index, typename W>
struct PadParams {
  int rank;
  PadMode mode;
  W fill;
  Index out_dims[kMaxRank];
  Index in_dims[kMaxRank];
  Index begin[kMaxRank];
  Index in_strides[kMaxRank];
};

template <typename W, typename Index>
__global__ void pad_kernel(const W* in, W* out, Index n, PadParams<Index, W> p) {
  for (Index i = global_thread<Index>(); i < n; i += grid_threads<Index>()) {
    Index rest = i;
    Index src = 0;
    bool fill = false;
#pragma unroll
    for (int a = kMaxRank - 1; a >= 0; --a) {
      if (a < p.rank) {
        const Index q = rest / p.out_dims[a];
        const Index c = rest - q * p.out_dims[a];
        rest = q;
        Index k = c - p.begin[a];
        const Index d = p.in_dims[a];
        if (k < 0 || k >= d) {
          if (p.mode == PadMode::kConstant) {
            fill = true;
          } else if (p.mode == PadMode::kEdge) {
            k = k < 0 ? Index(0) : d - 1;
          } else {
            k = k < 0 ? -k : 2 * (d - 1) - k;
          }
        }
        src += k * p.in_strides[a];
      }
    }
    out[i] = fill ? p.fill : in[src];
  }
}

PadMode pad_mode(const std::string& mode) {
  if (mode == "reflect") return PadMode::kReflect;
  if (mode == "edge") return PadMode::kEdge;
  return PadMode::kConstant;
}

void launch_pad(const StepLaunch& launch) {
  const DeviceTensor& x = launch.inputs.at(0);
  const DeviceTensor& out = launch.outputs.at(0);
  const int rank = x.shape.rank();
  if (rank > kMaxRank) launch.attrs->fail("the CUDA kernel pads at most 8 axes");
  const std::int64_t n = volume(out.shape);
  if (n == 0) return;
  const auto pads = launch.attrs->get_ints("pads");
  const PadMode mode = pad_mode(launch.attrs->get_string("mode", "constant"));
  const std::uint64_t fill_bits = host_scalar_bits(x.dtype, launch.attrs->get_float("value", 0.0));
  const auto in_strides = row_major_strides(x.shape);
  const std::int64_t extent = std::max(n, volume(x.shape));
  const bool handled = dispatch_element_word(element_size(x.dtype), [&](auto tag) {
    using W = typename decltype(tag)::type;
    auto run = [&](auto index) {
      using Index = decltype(index);
      PadParams<Index, W> p{};
      p.rank = rank;
      p.mode = mode;
      std::memcpy(&p.fill, &fill_bits, sizeof(W));
      for (int a = 0; a < kMaxRank; ++a) {
        const auto ua = static_cast<std::size_t>(a);
        p.out_dims[a] = static_cast<Index>(a < rank ? out.shape[a] : 1);
        p.in_dims[a] = static_cast<Index>(a < rank ? x.shape[a] : 1);
        p.begin[a] = static_cast<Index>(a < rank ? pads.at(ua) : 0);
        p.in_strides[a] = static_cast<Index>(a < rank ? in_strides[ua] : 0);
      }
      pad_kernel<W, Index><<<grid_for(n), kThreads, 0, launch.stream>>>(
          static_cast<const W*>(x.data), static_cast<W*>(out.data), static_cast<Index>(n), p);
    };
    if (fits_index32(extent)) {
      run(std::int32_t{0});
    } else {
      run(std::int64_t{0});
    }
    check_launch(launch);
  });
  if (!handled) launch.attrs->fail("unsupported element size for the CUDA kernel");
}

// ---- supports ----

// Every dtype has an element size of 1, 2, 4 or 8 bytes, so only ranks and attributes matter.
bool supports_any(const graph::Graph& /*graph*/, const graph::Layer& layer, Precision /*precision*/) {
  return !layer.inputs.empty() && has_tensor(layer, 0);
}

bool supports_input_rank8(const graph::Graph& graph, const graph::Layer& layer, Precision precision) {
  return supports_any(graph, layer, precision) && input_rank(graph, layer, 0) <= kMaxRank;
}

bool supports_output_rank8(const graph::Graph& graph, const graph::Layer& layer, Precision precision) {
  return supports_any(graph, layer, precision) && output_rank(graph, layer, 0) <= kMaxRank;
}

bool supports_concat(const graph::Graph& /*graph*/, const graph::Layer& layer, Precision /*precision*/) {
  if (layer.inputs.empty()) return false;
  for (std::size_t i = 0; i < layer.inputs.size(); ++i) {
    if (!has_tensor(layer, i)) return false;
  }
  return true;
}

bool supports_gather(const graph::Graph& graph, const graph::Layer& layer, Precision precision) {
  if (!supports_any(graph, layer, precision) || !has_tensor(layer, 1)) return false;
  const DataType indices = input_dtype(graph, layer, 1);
  return indices == DataType::kI32 || indices == DataType::kI64;
}

bool supports_pad(const graph::Graph& graph, const graph::Layer& layer, Precision precision) {
  if (!supports_input_rank8(graph, layer, precision)) return false;
  const graph::AttrReader attrs(layer.attrs, layer.name, layer.op);
  const std::string mode = attrs.get_string("mode", "constant");
  return mode == "constant" || mode == "reflect" || mode == "edge";
}

}  // namespace

void register_data_movement_kernels(std::vector<KernelEntry>& kernels) {
  const std::vector<KernelEntry> entries = {
      {"reshape_any_copy", "reshape", supports_any, launch_same_order, 0},
      {"squeeze_any_copy", "squeeze", supports_any, launch_same_order, 0},
      {"unsqueeze_any_copy", "unsqueeze", supports_any, launch_same_order, 0},
      {"transpose_any_strided", "transpose", supports_input_rank8, launch_transpose, 0},
      {"slice_any_strided", "slice", supports_input_rank8, launch_slice, 0},
      {"concat_any_copy", "concat", supports_concat, launch_concat, 0},
      {"split_any_copy", "split", supports_any, launch_split, 0},
      {"gather_any_i32i64_rows", "gather", supports_gather, launch_gather, 0},
      {"expand_any_strided", "expand", supports_output_rank8, launch_expand, 0},
      {"pad_any_indexed", "pad", supports_pad, launch_pad, 0},
  };
  kernels.insert(kernels.end(), entries.begin(), entries.end());
}

}  // namespace tensoracle::cuda
