// CUDA kernels of the data_movement family (reshape, transpose, slice, concat, split, gather, expand, pad,
// space_to_depth), any dtype; space_to_depth also quantizes (`quantize_to`).
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "backends/cuda/cuda_step.hpp"
#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/quantize_rounding.cuh"

namespace tensoracle::cuda {
namespace {

using namespace kernels;  // NOLINT(google-build-using-namespace): the shared helpers of this backend's kernels

std::int64_t normalize_axis(std::int64_t axis, int rank) { return axis < 0 ? axis + rank : axis; }

// The widest word (16, 8, 4, 2 or 1 bytes) dividing every byte count given.
std::size_t widest_word(const std::vector<std::int64_t>& byte_counts) {
  std::size_t word = 16;
  auto fits = [&](std::size_t w) {
    for (std::int64_t b : byte_counts) {
      if (b % static_cast<std::int64_t>(w) != 0) return false;
    }
    return true;
  };
  while (word > 1 && !fits(word)) word /= 2;
  return word;
}

// Word widths are planned at prepare from the byte counts (widest_word); the launch narrows the planned width by the
// addresses it binds (address_word), which gives the widest word dividing the counts and the addresses together (a
// power of two divides them all exactly when it divides each). The plans of every width a launch can pick are kept
// by slot: 1, 2, 4, 8 and 16 bytes.
constexpr int kWordSlots = 5;

int word_slot(std::size_t word) { return word >= 16 ? 4 : word >= 8 ? 3 : word >= 4 ? 2 : word >= 2 ? 1 : 0; }

// The widest word (up to 16 bytes) dividing the address.
std::size_t address_word(const void* p) { return pointer_alignment(p, 16); }

void copy_bytes(const StepLaunch& launch, void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0 || dst == src) return;
  TENSORACLE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, launch.stream), layer_name(launch));
}

// Division by a divisor fixed when the step is prepared. int32 numerators (in [0, 2^31)) take a multiply-high and a
// shift (Granlund-Montgomery: mul = ceil(2^(31 + l) / d) with l = ceil(log2 d), exact for every numerator below
// 2^31); int64 numerators divide.
template <typename Index>
struct Divisor;

template <>
struct Divisor<std::int32_t> {
  std::int32_t d = 1;
  std::uint32_t mul = 0;
  std::uint32_t shift = 0;

  Divisor() = default;
  explicit Divisor(std::int64_t divisor) : d(static_cast<std::int32_t>(divisor)) {
    if (d > 1) {
      int l = 0;
      while ((std::int64_t{1} << l) < divisor) ++l;
      const int p = 31 + l;
      mul = static_cast<std::uint32_t>(((std::uint64_t{1} << p) + static_cast<std::uint64_t>(d) - 1) /
                                       static_cast<std::uint64_t>(d));
      shift = static_cast<std::uint32_t>(p - 32);
    }
  }
  __device__ __forceinline__ std::int32_t div(std::int32_t n) const {
    return d == 1 ? n : static_cast<std::int32_t>(__umulhi(static_cast<std::uint32_t>(n), mul) >> shift);
  }
};

template <>
struct Divisor<std::int64_t> {
  std::int64_t d = 1;

  Divisor() = default;
  explicit Divisor(std::int64_t divisor) : d(divisor) {}
  __device__ __forceinline__ std::int64_t div(std::int64_t n) const { return n / d; }
};

template <typename W, typename Index>
__global__ void copy_words_kernel(const W* src, W* dst, Index n) {
  wait_for_preceding_steps();
  for (Index i = global_thread<Index>(); i < n; i += grid_threads<Index>()) dst[i] = src[i];
}

// A contiguous copy: 16-byte words in a kernel when the size and both addresses allow it, else cudaMemcpyAsync.
struct ContiguousCopy {
  std::size_t bytes = 0;
  bool whole_words = false;  // bytes is a multiple of 16 (the addresses are tested at launch)
  std::int64_t words = 0;
  bool index32 = true;
  unsigned grid = 1;
};

ContiguousCopy plan_contiguous(std::size_t bytes) {
  ContiguousCopy plan;
  plan.bytes = bytes;
  plan.whole_words = widest_word({static_cast<std::int64_t>(bytes)}) == 16;
  plan.words = static_cast<std::int64_t>(bytes / 16);
  plan.index32 = fits_index32(plan.words);
  plan.grid = grid_for(plan.words);
  return plan;
}

void copy_contiguous(const StepLaunch& launch, const ContiguousCopy& plan, void* dst, const void* src) {
  if (plan.bytes == 0 || dst == src) return;
  if (!plan.whole_words || address_word(dst) != 16 || address_word(src) != 16) {
    copy_bytes(launch, dst, src, plan.bytes);
    return;
  }
  if (plan.index32) {
    launch_kernel(launch, copy_words_kernel<uint4, std::int32_t>, plan.grid, kThreads, 0,
                  static_cast<const uint4*>(src), static_cast<uint4*>(dst), static_cast<std::int32_t>(plan.words));
  } else {
    launch_kernel(launch, copy_words_kernel<uint4, std::int64_t>, plan.grid, kThreads, 0,
                  static_cast<const uint4*>(src), static_cast<uint4*>(dst), plan.words);
  }
}

// ---- reshape, squeeze, unsqueeze: the row-major element order is unchanged ----

ContiguousCopy prepare_same_order(const StepLaunch& launch) {
  const DeviceTensor& x = launch.inputs.at(0);
  const DeviceTensor& out = launch.outputs.at(0);
  const std::int64_t n = volume(out.shape);
  if (n != volume(x.shape)) launch.attrs->fail("internal error: the output holds a different number of elements");
  return plan_contiguous(static_cast<std::size_t>(n) * element_size(out.dtype));
}

void launch_same_order(const StepLaunch& launch, const ContiguousCopy& plan) {
  const void* x = launch.inputs.at(0).data;
  void* out = launch.outputs.at(0).data;
  if (out == x) return;  // the memory plan made the output an alias of the input
  copy_contiguous(launch, plan, out, x);
}

// ---- strided gathers: transpose, slice, expand ----
// out[i] = in[base + offsets(i)] with per-axis input strides (negative for backward slices, 0 for broadcast axes).
// Three kernels, chosen from the merged axes: a 32x32 shared-memory tile transpose when the last two axes of a
// contiguous input are swapped; else one thread per word with the divisions precomputed, where the word is as wide as
// 16 bytes when the innermost axis is contiguous in the input (runs of the last dims move as whole words).

// The merged output axes as divisors (output index -> per-axis index) and input strides, in words.
template <typename Index>
struct WordIndexer {
  int rank;
  Divisor<Index> dims[kMaxRank];
  Index strides[kMaxRank];

  __device__ __forceinline__ Index offset(Index i) const {
    Index off = 0;
#pragma unroll
    for (int a = kMaxRank - 1; a >= 1; --a) {
      if (a < rank) {
        const Index q = dims[a].div(i);
        off += (i - q * dims[a].d) * strides[a];
        i = q;
      }
    }
    if (rank > 0) off += i * strides[0];
    return off;
  }
};

template <typename W, typename Index>
__global__ void strided_copy_kernel(const W* in, W* out, Index n, Index base, WordIndexer<Index> ix) {
  wait_for_preceding_steps();
  for (Index i = global_thread<Index>(); i < n; i += grid_threads<Index>()) out[i] = in[base + ix.offset(i)];
}

constexpr int kTile = 32;
constexpr int kTileRows = 8;  // a block of 32x8 threads moves a 32x32 tile

// in [batches, rows, cols] -> out [batches, cols, rows]; tiles are read and written along rows of 32 elements.
template <typename W>
__global__ void __launch_bounds__(kTile* kTileRows)
    transpose_tiled_kernel(const W* in, W* out, std::int64_t batches, std::int64_t rows, std::int64_t cols) {
  wait_for_preceding_steps();
  __shared__ W tile[kTile][kTile + 1];  // the padding column keeps the column reads free of bank conflicts
  const std::int64_t tiles_r = (rows + kTile - 1) / kTile;
  const std::int64_t tiles_c = (cols + kTile - 1) / kTile;
  const auto tx = static_cast<int>(threadIdx.x);
  const auto ty = static_cast<int>(threadIdx.y);
  // The loop bounds only depend on the block, so every thread reaches the barriers.
  for (std::int64_t b = blockIdx.z; b < batches; b += gridDim.z) {
    const W* src = in + b * rows * cols;
    W* dst = out + b * rows * cols;
    for (std::int64_t tr = blockIdx.y; tr < tiles_r; tr += gridDim.y) {
      for (std::int64_t tc = blockIdx.x; tc < tiles_c; tc += gridDim.x) {
        const std::int64_t r0 = tr * kTile;
        const std::int64_t c0 = tc * kTile;
#pragma unroll
        for (int k = 0; k < kTile; k += kTileRows) {
          const std::int64_t r = r0 + ty + k;
          const std::int64_t c = c0 + tx;
          if (r < rows && c < cols) tile[ty + k][tx] = src[r * cols + c];
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < kTile; k += kTileRows) {
          const std::int64_t c = c0 + ty + k;  // the output row
          const std::int64_t r = r0 + tx;      // the output column
          if (c < cols && r < rows) dst[c * rows + r] = tile[tx][ty + k];
        }
        __syncthreads();
      }
    }
  }
}

// True when the plan reads a contiguous [batches, cols, rows] input as [batches, rows, cols] (its last two axes
// swapped), with both sides wide enough for tiles to pay.
bool is_matrix_transpose(const StridePlan<1>& plan, std::int64_t& batches, std::int64_t& rows, std::int64_t& cols) {
  const int r = plan.rank;
  if (r != 2 && r != 3) return false;
  const std::int64_t out_rows = plan.dims[r - 2];
  const std::int64_t out_cols = plan.dims[r - 1];
  if (plan.strides[0][r - 2] != 1 || plan.strides[0][r - 1] != out_rows) return false;
  if (r == 3 && plan.strides[0][0] != out_rows * out_cols) return false;
  if (out_rows < 8 || out_cols < 8) return false;
  batches = r == 3 ? plan.dims[0] : 1;
  rows = out_cols;  // the input's rows are the output's columns
  cols = out_rows;
  return true;
}

// strided_copy_kernel's arguments at one word width: the word count, the input base and the indexer, in words.
template <typename Index>
struct StridedWords {
  Index n;
  Index base;
  WordIndexer<Index> ix;
};

struct StridedCopyPlan {
  bool empty = false;
  std::size_t element = 0;
  // The tile transpose (when the merged axes are a matrix transpose), in elements.
  bool tiled = false;
  dim3 tile_grid;
  std::int64_t batches = 0, rows = 0, cols = 0, base = 0;
  // Else one thread per word: words as wide as max_word when the innermost axis is contiguous in the input (what its
  // runs, the strides and the base allow; the element otherwise), narrowed at launch by the addresses.
  std::size_t max_word = 0;
  struct Words {
    unsigned grid = 1;
    std::variant<StridedWords<std::int32_t>, StridedWords<std::int64_t>> args;  // int32 when every offset fits
  };
  std::array<Words, kWordSlots> words;  // by word_slot, the widths from the element to max_word
};

// `strides` are per output axis, in elements of the input; `input_elements` bounds every offset.
StridedCopyPlan plan_strided_copy(const StepLaunch& launch, const std::vector<std::int64_t>& strides, std::int64_t base,
                                  std::int64_t input_elements) {
  const DeviceTensor& out = launch.outputs.at(0);
  StridedCopyPlan plan;
  const std::int64_t n = volume(out.shape);
  if (n == 0) {
    plan.empty = true;
    return plan;
  }
  StridePlan<1> merged;
  if (!make_stride_plan<1>(out.shape.values(), {strides}, merged)) {
    launch.attrs->fail("the CUDA kernel handles at most 8 axes that can't be merged");
  }
  const std::size_t element = element_size(out.dtype);
  const auto e = static_cast<std::int64_t>(element);
  const int rank = merged.rank;
  // Every dtype has an element size of 1, 2, 4 or 8 bytes.
  if (!dispatch_element_word(element, [](auto /*tag*/) {})) {
    launch.attrs->fail("unsupported element size for the CUDA kernel");
  }
  plan.element = element;

  if (is_matrix_transpose(merged, plan.batches, plan.rows, plan.cols)) {
    plan.tiled = true;
    plan.base = base;
    const std::int64_t tiles_r = (plan.rows + kTile - 1) / kTile;
    const std::int64_t tiles_c = (plan.cols + kTile - 1) / kTile;
    plan.tile_grid = dim3(static_cast<unsigned>(std::min<std::int64_t>(tiles_c, kMaxGridBlocks)),
                          static_cast<unsigned>(std::min<std::int64_t>(tiles_r, 65535)),
                          static_cast<unsigned>(std::min<std::int64_t>(plan.batches, 65535)));
    return plan;
  }

  // Move whole words of the innermost axis when it is contiguous in the input and every run starts on a word.
  plan.max_word = element;
  if (rank > 0 && merged.strides[0][rank - 1] == 1) {
    std::vector<std::int64_t> byte_counts = {merged.dims[rank - 1] * e, base * e};
    for (int a = 0; a + 1 < rank; ++a) byte_counts.push_back(merged.strides[0][a] * e);
    plan.max_word = std::max(element, widest_word(byte_counts));
  }
  for (std::size_t word = element; word <= plan.max_word; word *= 2) {
    const auto ratio = static_cast<std::int64_t>(word / element);
    StridePlan<1> w = merged;
    std::int64_t words = n;
    std::int64_t word_base = base;
    if (ratio > 1) {
      w.dims[rank - 1] /= ratio;
      for (int a = 0; a + 1 < rank; ++a) w.strides[0][a] /= ratio;
      word_base /= ratio;
      words /= ratio;
    }
    const std::int64_t extent = std::max(words, input_elements);  // in elements: a bound on words too
    StridedCopyPlan::Words& slot = plan.words[static_cast<std::size_t>(word_slot(word))];
    slot.grid = grid_for(words);
    auto make = [&](auto index) {
      using Index = decltype(index);
      StridedWords<Index> args{};
      args.n = static_cast<Index>(words);
      args.base = static_cast<Index>(word_base);
      args.ix.rank = rank;
      for (int a = 0; a < kMaxRank; ++a) {
        args.ix.dims[a] = Divisor<Index>(a < rank ? w.dims[a] : 1);
        args.ix.strides[a] = static_cast<Index>(a < rank ? w.strides[0][a] : 0);
      }
      slot.args = args;
    };
    if (fits_index32(extent)) {
      make(std::int32_t{0});
    } else {
      make(std::int64_t{0});
    }
  }
  return plan;
}

void launch_strided_copy(const StepLaunch& launch, const StridedCopyPlan& plan) {
  if (plan.empty) return;
  const void* x = launch.inputs.at(0).data;
  void* out = launch.outputs.at(0).data;
  if (plan.tiled) {
    dispatch_element_word(plan.element, [&](auto tag) {
      using W = typename decltype(tag)::type;
      launch_kernel(launch, transpose_tiled_kernel<W>, plan.tile_grid, dim3(kTile, kTileRows), 0,
                    static_cast<const W*>(x) + plan.base, static_cast<W*>(out), plan.batches, plan.rows, plan.cols);
    });
    return;
  }
  const std::size_t word = std::max(plan.element, std::min({plan.max_word, address_word(x), address_word(out)}));
  const StridedCopyPlan::Words& slot = plan.words[static_cast<std::size_t>(word_slot(word))];
  std::visit(
      [&](const auto& args) {
        using Index = decltype(args.n);
        dispatch_word(word, [&](auto tag) {
          using W = typename decltype(tag)::type;
          launch_kernel(launch, strided_copy_kernel<W, Index>, slot.grid, kThreads, 0, static_cast<const W*>(x),
                        static_cast<W*>(out), args.n, args.base, args.ix);
        });
      },
      slot.args);
}

StridedCopyPlan prepare_transpose(const StepLaunch& launch) {
  const DeviceTensor& x = launch.inputs.at(0);
  const auto perm = launch.attrs->get_ints("perm");
  const auto in_strides = row_major_strides(x.shape);
  std::vector<std::int64_t> strides;  // input stride of each output axis
  for (auto p : perm) strides.push_back(in_strides.at(static_cast<std::size_t>(normalize_axis(p, x.shape.rank()))));
  return plan_strided_copy(launch, strides, 0, volume(x.shape));
}

// ONNX slicing as the CPU reference resolves it: a negative start counts from the end, then it is clamped to [0, d]
// (step > 0) or [0, d - 1] (step < 0); the output shape gives the count.
StridedCopyPlan prepare_slice(const StepLaunch& launch) {
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
  return plan_strided_copy(launch, strides, base, volume(x.shape));
}

StridedCopyPlan prepare_expand(const StepLaunch& launch) {
  const DeviceTensor& x = launch.inputs.at(0);
  return plan_strided_copy(launch, broadcast_strides(x.shape, launch.outputs.at(0).shape), 0, volume(x.shape));
}

// ---- concat and split: runs of rows copied between pitched layouts ----
// Up to kMaxParts parts move in one launch, one thread per word of their columns of the whole tensor (the concat
// output or the split input); each thread finds its part from its column. Words are as wide as every run, row pitch
// and address allow (up to 16 bytes).

constexpr int kMaxParts = 8;

template <typename W, typename Index>
struct PartList {
  int count;
  Divisor<Index> span;         // words of the parts in one row of the whole
  Index pitch;                 // words from one row of the whole to the next
  Index start[kMaxParts + 1];  // the first word of each part within the span; start[count] is the span's end
  W* parts[kMaxParts];         // part k holds rows of start[k + 1] - start[k] words; read by concat, written by split
};

template <typename W, typename Index, bool kSplit>
__global__ void parts_copy_kernel(W* whole, Index n, PartList<W, Index> p) {
  wait_for_preceding_steps();
  for (Index i = global_thread<Index>(); i < n; i += grid_threads<Index>()) {
    const Index r = p.span.div(i);
    const Index c = i - r * p.span.d;
    // The last part starting at or before c (an empty part is followed by one starting at the same column); static
    // indices keep the list in the parameter space.
    W* part = p.parts[0];
    Index first = p.start[0];
    Index end = p.start[1];
#pragma unroll
    for (int k = 1; k < kMaxParts; ++k) {
      if (k < p.count && p.start[k] <= c) {
        part = p.parts[k];
        first = p.start[k];
        end = p.start[k + 1];
      }
    }
    const Index j = r * (end - first) + (c - first);
    if (kSplit) {
      part[j] = whole[r * p.pitch + c];
    } else {
      whole[r * p.pitch + c] = part[j];
    }
  }
}

// The part lists of every word and index type; a prepared list has its parts' addresses filled at launch.
using AnyPartList = std::variant<PartList<std::uint8_t, std::int32_t>, PartList<std::uint8_t, std::int64_t>,
                                 PartList<std::uint16_t, std::int32_t>, PartList<std::uint16_t, std::int64_t>,
                                 PartList<std::uint32_t, std::int32_t>, PartList<std::uint32_t, std::int64_t>,
                                 PartList<std::uint64_t, std::int32_t>, PartList<std::uint64_t, std::int64_t>,
                                 PartList<uint4, std::int32_t>, PartList<uint4, std::int64_t>>;

// One launch of parts_copy_kernel: up to kMaxParts parts from part `first` on, copied between the whole (rows of
// `pitch` elements, the group's columns starting `whole_offset` bytes into each row) and the parts (part k is
// [outer, runs[k]], at column sum(runs[<k]) of the group's columns).
struct PartsGroup {
  std::size_t first = 0;
  std::int64_t whole_offset = 0;
  // The parts of a nonempty run: their addresses narrow the word (the others are never dereferenced).
  std::array<bool, kMaxParts> addressed{};
  std::size_t max_word = 0;  // what the row pitch and the runs allow
  struct Words {
    unsigned grid = 1;
    std::int64_t n = 0;  // words to copy
    AnyPartList list;    // in the word's type and the index type (int32 when every offset fits)
  };
  std::array<Words, kWordSlots> words;  // by word_slot, the widths from the element to max_word
};

struct PartsPlan {
  std::size_t element = 0;
  std::vector<PartsGroup> groups;  // one launch per kMaxParts parts; a group without rows or columns has none
};

template <typename W, typename Index>
PartList<W, Index> make_part_list(const std::vector<std::int64_t>& runs, std::int64_t span, std::int64_t pitch,
                                  std::int64_t ratio) {
  PartList<W, Index> list{};
  list.count = static_cast<int>(runs.size());
  list.span = Divisor<Index>(span / ratio);
  list.pitch = static_cast<Index>(pitch / ratio);
  Index start = 0;
  for (std::size_t k = 0; k < runs.size(); ++k) {
    list.start[k] = start;
    start += static_cast<Index>(runs[k] / ratio);
  }
  for (std::size_t k = runs.size(); k <= static_cast<std::size_t>(kMaxParts); ++k) list.start[k] = start;
  return list;
}

// `whole` is the concat output or the split input; one launch per kMaxParts parts.
PartsPlan plan_parts(const StepLaunch& launch, const DeviceTensor& whole, const std::vector<DeviceTensor>& parts) {
  const int rank = whole.shape.rank();
  const auto axis = static_cast<int>(normalize_axis(launch.attrs->get_int("axis"), rank));
  const std::int64_t outer = volume(whole.shape, 0, axis);
  const std::int64_t inner = volume(whole.shape, axis + 1, rank);
  const std::int64_t pitch = whole.shape[axis] * inner;
  const std::size_t element = element_size(whole.dtype);
  const auto e = static_cast<std::int64_t>(element);
  PartsPlan plan;
  plan.element = element;
  std::int64_t offset = 0;  // elements of a row of the whole before the current group
  for (std::size_t first = 0; first < parts.size(); first += kMaxParts) {
    const std::size_t last = std::min(parts.size(), first + kMaxParts);
    std::vector<std::int64_t> runs;
    std::int64_t span = 0;
    for (std::size_t k = first; k < last; ++k) {
      runs.push_back(parts[k].shape[axis] * inner);
      span += runs.back();
    }
    PartsGroup group;
    group.first = first;
    group.whole_offset = offset * e;
    offset += span;
    if (outer == 0 || span == 0) continue;
    std::vector<std::int64_t> byte_counts = {pitch * e};
    for (std::size_t k = 0; k < runs.size(); ++k) {
      if (runs[k] == 0) continue;  // never dereferenced
      byte_counts.push_back(runs[k] * e);
      group.addressed[k] = true;
    }
    group.max_word = std::max(element, widest_word(byte_counts));
    const bool index32 = fits_index32(outer * pitch);
    for (std::size_t word = element; word <= group.max_word; word *= 2) {
      const auto ratio = static_cast<std::int64_t>(word / element);
      PartsGroup::Words& slot = group.words[static_cast<std::size_t>(word_slot(word))];
      slot.n = outer * span / ratio;
      slot.grid = grid_for(slot.n);
      dispatch_word(word, [&](auto tag) {
        using W = typename decltype(tag)::type;
        if (index32) {
          slot.list = make_part_list<W, std::int32_t>(runs, span, pitch, ratio);
        } else {
          slot.list = make_part_list<W, std::int64_t>(runs, span, pitch, ratio);
        }
      });
    }
    plan.groups.push_back(group);
  }
  return plan;
}

// kSplit copies whole -> parts, else parts -> whole; `parts` are the group's.
template <bool kSplit, typename W, typename Index>
void copy_parts(const StepLaunch& launch, void* whole, const DeviceTensor* parts, const PartsGroup::Words& slot,
                PartList<W, Index> list) {
  for (int k = 0; k < list.count; ++k) list.parts[k] = static_cast<W*>(parts[k].data);
  launch_kernel(launch, parts_copy_kernel<W, Index, kSplit>, slot.grid, kThreads, 0, static_cast<W*>(whole),
                static_cast<Index>(slot.n), list);
}

template <bool kSplit>
void launch_parts(const StepLaunch& launch, const PartsPlan& plan, void* whole,
                  const std::vector<DeviceTensor>& parts) {
  for (const PartsGroup& group : plan.groups) {
    void* group_whole = static_cast<std::byte*>(whole) + group.whole_offset;
    const DeviceTensor* group_parts = parts.data() + group.first;
    std::size_t word = std::min(group.max_word, address_word(group_whole));
    for (int k = 0; k < kMaxParts; ++k) {
      if (group.addressed[static_cast<std::size_t>(k)]) word = std::min(word, address_word(group_parts[k].data));
    }
    word = std::max(plan.element, word);
    const PartsGroup::Words& slot = group.words[static_cast<std::size_t>(word_slot(word))];
    std::visit([&](const auto& list) { copy_parts<kSplit>(launch, group_whole, group_parts, slot, list); }, slot.list);
  }
}

PartsPlan prepare_concat(const StepLaunch& launch) { return plan_parts(launch, launch.outputs.at(0), launch.inputs); }

void launch_concat(const StepLaunch& launch, const PartsPlan& plan) {
  launch_parts<false>(launch, plan, launch.outputs.at(0).data, launch.inputs);
}

PartsPlan prepare_split(const StepLaunch& launch) { return plan_parts(launch, launch.inputs.at(0), launch.outputs); }

void launch_split(const StepLaunch& launch, const PartsPlan& plan) {
  launch_parts<true>(launch, plan, launch.inputs.at(0).data, launch.outputs);
}

// ---- gather ----
// out [outer, count, inner] takes data [outer, dim, inner] at indices (count of them, i32 or i64); a negative index
// counts from the end. The CPU reference rejects an index outside [-dim, dim) before writing anything; a kernel can't
// report it, so such an index yields zero bytes (never a read outside data).

template <typename W, typename I, typename Index>
__global__ void gather_kernel(const W* data, const I* indices, W* out, Index n, Index count, Index inner_w, Index dim) {
  wait_for_preceding_steps();
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

// gather_kernel's sizes at one word width, in its index type.
template <typename Index>
struct GatherWords {
  Index n;
  Index count;
  Index inner_w;
  Index dim;
};

struct GatherPlan {
  bool empty = false;
  DataType indices = DataType::kI64;
  // Rows of `inner` elements move as whole words: as wide as max_word (what the row size allows), narrowed at launch
  // by both addresses.
  std::size_t max_word = 1;
  struct Words {
    unsigned grid = 1;
    std::variant<GatherWords<std::int32_t>, GatherWords<std::int64_t>> sizes;  // int32 when every offset fits
  };
  std::array<Words, kWordSlots> words;  // by word_slot, the widths up to max_word
};

GatherPlan prepare_gather(const StepLaunch& launch) {
  const DeviceTensor& data = launch.inputs.at(0);
  const DeviceTensor& indices = launch.inputs.at(1);
  const int rank = data.shape.rank();
  const auto axis = static_cast<int>(normalize_axis(launch.attrs->get_int("axis", 0), rank));
  const std::int64_t dim = data.shape[axis];
  const std::int64_t outer = volume(data.shape, 0, axis);
  const std::int64_t inner = volume(data.shape, axis + 1, rank);
  const std::int64_t count = volume(indices.shape);
  GatherPlan plan;
  if (outer == 0 || inner == 0 || count == 0) {
    plan.empty = true;
    return plan;
  }
  if (!in_list(TypeList<std::int32_t, std::int64_t>{}, indices.dtype)) {
    launch.attrs->fail("unsupported indices dtype for the CUDA kernel");
  }
  plan.indices = indices.dtype;
  const auto e = static_cast<std::int64_t>(element_size(data.dtype));
  plan.max_word = widest_word({inner * e});
  for (std::size_t word = 1; word <= plan.max_word; word *= 2) {
    const std::int64_t inner_w = inner * e / static_cast<std::int64_t>(word);
    const std::int64_t n = outer * count * inner_w;
    const std::int64_t extent = std::max(n, outer * dim * inner_w);
    GatherPlan::Words& slot = plan.words[static_cast<std::size_t>(word_slot(word))];
    slot.grid = grid_for(n);
    if (fits_index32(extent)) {
      slot.sizes = GatherWords<std::int32_t>{static_cast<std::int32_t>(n), static_cast<std::int32_t>(count),
                                             static_cast<std::int32_t>(inner_w), static_cast<std::int32_t>(dim)};
    } else {
      slot.sizes = GatherWords<std::int64_t>{n, count, inner_w, dim};
    }
  }
  return plan;
}

void launch_gather(const StepLaunch& launch, const GatherPlan& plan) {
  if (plan.empty) return;
  const void* data = launch.inputs.at(0).data;
  const void* indices = launch.inputs.at(1).data;
  void* out = launch.outputs.at(0).data;
  const std::size_t word = std::min({plan.max_word, address_word(data), address_word(out)});
  const GatherPlan::Words& slot = plan.words[static_cast<std::size_t>(word_slot(word))];
  dispatch_word(word, [&](auto word_tag) {
    using W = typename decltype(word_tag)::type;
    dispatch(TypeList<std::int32_t, std::int64_t>{}, plan.indices, [&](auto index_tag) {
      using I = typename decltype(index_tag)::type;
      std::visit(
          [&](const auto& s) {
            using Index = decltype(s.n);
            launch_kernel(launch, gather_kernel<W, I, Index>, slot.grid, kThreads, 0, static_cast<const W*>(data),
                          static_cast<const I*>(indices), static_cast<W*>(out), s.n, s.count, s.inner_w, s.dim);
          },
          slot.sizes);
    });
  });
}

// ---- pad ----
// Each output element reads input index c - begin per axis; outside [0, d) it is the fill value (constant), the
// clamped index (edge) or the index reflected about the edge elements (reflect; pads < d, checked by the shape
// function).

enum class PadMode : int { kConstant, kReflect, kEdge };

template <typename Index, typename W>
struct PadParams {
  using IndexType = Index;
  using Word = W;
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
  wait_for_preceding_steps();
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

// Constant padding of the last axis alone ([rows, in_len] -> [rows, out_len], input at column `begin`): one division
// per element instead of one per axis (the channels-last pass pads an image's 3 channels to 8 this way).
template <typename W, typename Index>
__global__ void pad_last_axis_kernel(const W* in, W* out, Index n, Index in_len, Index out_len, Index begin, W fill) {
  wait_for_preceding_steps();
  for (Index i = global_thread<Index>(); i < n; i += grid_threads<Index>()) {
    const Index row = i / out_len;
    const Index k = i - row * out_len - begin;
    out[i] = k >= 0 && k < in_len ? in[row * in_len + k] : fill;
  }
}

// The same when an output row is one 8- or 16-byte word V: each thread builds a row in registers and stores it whole.
template <typename W, typename V, typename Index>
__global__ void pad_last_axis_rows_kernel(const W* in, V* out, Index rows, Index in_len, Index begin, W fill) {
  wait_for_preceding_steps();
  constexpr int kOut = static_cast<int>(sizeof(V) / sizeof(W));
  for (Index r = global_thread<Index>(); r < rows; r += grid_threads<Index>()) {
    W v[kOut];
#pragma unroll
    for (int k = 0; k < kOut; ++k) {
      const Index c = k - begin;
      v[k] = c >= 0 && c < in_len ? in[r * in_len + c] : fill;
    }
    V word;
    memcpy(&word, v, sizeof word);
    out[r] = word;
  }
}

// Constant padding of the last two axes alone ([planes, in_h, in_w] -> [planes, out_h, out_w], input at (begin_h,
// begin_w)): a block per output row, its threads along the row, so one division per row (the space-to-depth form of an
// image's stem pads its rows and columns this way; the indexed kernel's division per axis per element took 5x longer).
template <typename W, typename Index>
__global__ void pad_last_two_axes_kernel(const W* in, W* out, Index rows, Index out_h, Index out_w, Index in_h,
                                         Index in_w, Index begin_h, Index begin_w, W fill) {
  wait_for_preceding_steps();
  for (Index r = blockIdx.x; r < rows; r += gridDim.x) {
    const Index plane = r / out_h;
    const Index ih = r - plane * out_h - begin_h;
    const bool inside = ih >= 0 && ih < in_h;
    const W* src = in + (plane * in_h + (inside ? ih : 0)) * in_w;
    W* dst = out + r * out_w;
    for (Index c = threadIdx.x; c < out_w; c += blockDim.x) {
      const Index iw = c - begin_w;
      dst[c] = inside && iw >= 0 && iw < in_w ? src[iw] : fill;
    }
  }
}

PadMode pad_mode(const std::string& mode) {
  if (mode == "reflect") return PadMode::kReflect;
  if (mode == "edge") return PadMode::kEdge;
  return PadMode::kConstant;
}

// The parameters in every index type and element word.
using AnyPadParams = std::variant<PadParams<std::int32_t, std::uint8_t>, PadParams<std::int64_t, std::uint8_t>,
                                  PadParams<std::int32_t, std::uint16_t>, PadParams<std::int64_t, std::uint16_t>,
                                  PadParams<std::int32_t, std::uint32_t>, PadParams<std::int64_t, std::uint32_t>,
                                  PadParams<std::int32_t, std::uint64_t>, PadParams<std::int64_t, std::uint64_t>>;
using WordPadParams = std::variant<PadParams<std::int32_t, uint4>, PadParams<std::int64_t, uint4>>;

struct PadPlan {
  bool empty = false;
  bool last_axis_only = false;  // constant padding of the last axis alone (pad_last_axis_kernel)
  int row_bytes = 0;            // last_axis_only with 8- or 16-byte output rows: pad_last_axis_rows_kernel (else 0)
  bool last_two_axes = false;   // constant padding of the last two axes alone (pad_last_two_axes_kernel)
  unsigned row_grid = 1;
  std::int64_t n = 0;
  unsigned grid = 1;
  AnyPadParams params;  // int32 when every index fits
  // The trailing axes no pad touches, merged into one axis of 16-byte words when their bytes are whole words (ViT's
  // class-token row: [B, 196, 768] -> [B, 197, 768] moves 96 words a row): the indexed kernel's divisions then run
  // once a word. Taken when both pointers are 16-byte aligned.
  bool words = false;
  std::int64_t word_n = 0;
  unsigned word_grid = 1;
  WordPadParams word_params;
};

// pad_kernel's parameters over `in_dims` -> `out_dims` (rank axes, padding starting at `begin`) in words W.
template <typename Index, typename W>
PadParams<Index, W> pad_params(const std::vector<std::int64_t>& in_dims, const std::vector<std::int64_t>& out_dims,
                               const std::vector<std::int64_t>& begin, PadMode mode, W fill) {
  const int rank = static_cast<int>(in_dims.size());
  PadParams<Index, W> p{};
  p.rank = rank;
  p.mode = mode;
  p.fill = fill;
  std::int64_t stride = 1;
  for (int a = kMaxRank - 1; a >= 0; --a) {
    const auto ua = static_cast<std::size_t>(a);
    p.out_dims[a] = static_cast<Index>(a < rank ? out_dims[ua] : 1);
    p.in_dims[a] = static_cast<Index>(a < rank ? in_dims[ua] : 1);
    p.begin[a] = static_cast<Index>(a < rank ? begin[ua] : 0);
    p.in_strides[a] = static_cast<Index>(a < rank ? stride : 0);
    if (a < rank) stride *= in_dims[ua];
  }
  return p;
}

// pad_params in int32 indices when `index32` (every index fits), else int64, as the variant `Params` holds them.
template <typename Params, typename W>
Params pad_params_of(bool index32, const std::vector<std::int64_t>& in_dims, const std::vector<std::int64_t>& out_dims,
                     const std::vector<std::int64_t>& begin, PadMode mode, W fill) {
  if (index32) return pad_params<std::int32_t>(in_dims, out_dims, begin, mode, fill);
  return pad_params<std::int64_t>(in_dims, out_dims, begin, mode, fill);
}

PadPlan prepare_pad(const StepLaunch& launch) {
  const DeviceTensor& x = launch.inputs.at(0);
  const DeviceTensor& out = launch.outputs.at(0);
  const int rank = x.shape.rank();
  if (rank > kMaxRank) launch.attrs->fail("the CUDA kernel pads at most 8 axes");
  PadPlan plan;
  const std::int64_t n = volume(out.shape);
  if (n == 0) {
    plan.empty = true;
    return plan;
  }
  const auto pads = launch.attrs->get_ints("pads");
  const PadMode mode = pad_mode(launch.attrs->get_string("mode", "constant"));
  const std::uint64_t fill_bits = host_scalar_bits(x.dtype, launch.attrs->get_float("value", 0.0));
  const std::int64_t extent = std::max(n, volume(x.shape));
  plan.n = n;
  plan.last_axis_only = mode == PadMode::kConstant && rank >= 1;
  for (int a = 0; a + 1 < rank; ++a) plan.last_axis_only = plan.last_axis_only && x.shape[a] == out.shape[a];
  if (plan.last_axis_only) {
    const auto row_bytes = static_cast<std::size_t>(out.shape[rank - 1]) * element_size(x.dtype);
    if (row_bytes == 8 || row_bytes == 16) {
      plan.row_bytes = static_cast<int>(row_bytes);
      plan.row_grid = grid_for(n / out.shape[rank - 1]);
    }
  }
  plan.last_two_axes = !plan.last_axis_only && mode == PadMode::kConstant && rank >= 2;
  for (int a = 0; a + 2 < rank; ++a) plan.last_two_axes = plan.last_two_axes && x.shape[a] == out.shape[a];
  plan.grid = grid_for(n);
  const std::vector<std::int64_t> in_dims = x.shape.values(), out_dims = out.shape.values();
  const std::vector<std::int64_t> begin(pads.begin(), pads.begin() + rank);
  const bool handled = dispatch_element_word(element_size(x.dtype), [&](auto tag) {
    using W = typename decltype(tag)::type;
    W fill{};
    std::memcpy(&fill, &fill_bits, sizeof(W));
    plan.params = pad_params_of<AnyPadParams>(fits_index32(extent), in_dims, out_dims, begin, mode, fill);
  });
  if (!handled) launch.attrs->fail("unsupported element size for the CUDA kernel");
  // The trailing axes no pad touches, as one axis of 16-byte words.
  int kept = rank;
  std::int64_t inner = 1;
  while (kept > 0 && x.shape[kept - 1] == out.shape[kept - 1] && pads.at(static_cast<std::size_t>(kept - 1)) == 0) {
    --kept;
    inner *= x.shape[kept];
  }
  const auto inner_bytes = inner * static_cast<std::int64_t>(element_size(x.dtype));
  if (kept < rank && inner_bytes % 16 == 0) {
    std::vector<std::int64_t> word_in(in_dims.begin(), in_dims.begin() + kept);
    std::vector<std::int64_t> word_out(out_dims.begin(), out_dims.begin() + kept);
    std::vector<std::int64_t> word_begin(begin.begin(), begin.begin() + kept);
    word_in.push_back(inner_bytes / 16);
    word_out.push_back(inner_bytes / 16);
    word_begin.push_back(0);
    uint4 fill{};
    auto* bytes = reinterpret_cast<unsigned char*>(&fill);
    for (std::size_t b = 0; b < sizeof fill; b += element_size(x.dtype))
      std::memcpy(bytes + b, &fill_bits, element_size(x.dtype));
    plan.words = true;
    plan.word_n = n * static_cast<std::int64_t>(element_size(x.dtype)) / 16;
    plan.word_grid = grid_for(plan.word_n);
    plan.word_params = pad_params_of<WordPadParams>(fits_index32(extent), word_in, word_out, word_begin, mode, fill);
  }
  return plan;
}

template <typename Index, typename W>
void run_pad(const StepLaunch& launch, const PadPlan& plan, const PadParams<Index, W>& p) {
  const auto* in = static_cast<const W*>(launch.inputs.at(0).data);
  auto* out = static_cast<W*>(launch.outputs.at(0).data);
  const int last = p.rank - 1;
  const bool rows = plan.row_bytes != 0 && reinterpret_cast<std::uintptr_t>(out) % plan.row_bytes == 0;
  if (rows && plan.row_bytes == 16) {
    launch_kernel(launch, pad_last_axis_rows_kernel<W, uint4, Index>, plan.row_grid, kThreads, 0, in,
                  reinterpret_cast<uint4*>(out), static_cast<Index>(plan.n / p.out_dims[last]), p.in_dims[last],
                  p.begin[last], p.fill);
  } else if (rows) {
    launch_kernel(launch, pad_last_axis_rows_kernel<W, uint2, Index>, plan.row_grid, kThreads, 0, in,
                  reinterpret_cast<uint2*>(out), static_cast<Index>(plan.n / p.out_dims[last]), p.in_dims[last],
                  p.begin[last], p.fill);
  } else if (plan.last_axis_only) {
    launch_kernel(launch, pad_last_axis_kernel<W, Index>, plan.grid, kThreads, 0, in, out, static_cast<Index>(plan.n),
                  p.in_dims[last], p.out_dims[last], p.begin[last], p.fill);
  } else if (plan.last_two_axes) {
    const Index rows = static_cast<Index>(plan.n / p.out_dims[last]);
    const int threads = p.out_dims[last] <= 128 ? 128 : 256;
    const auto blocks = static_cast<unsigned>(std::min<std::int64_t>(rows, std::int64_t{1} << 30));
    launch_kernel(launch, pad_last_two_axes_kernel<W, Index>, blocks, threads, 0, in, out, rows, p.out_dims[last - 1],
                  p.out_dims[last], p.in_dims[last - 1], p.in_dims[last], p.begin[last - 1], p.begin[last], p.fill);
  } else {
    launch_kernel(launch, pad_kernel<W, Index>, plan.grid, kThreads, 0, in, out, static_cast<Index>(plan.n), p);
  }
}

void launch_pad(const StepLaunch& launch, const PadPlan& plan) {
  if (plan.empty) return;
  const void* in = launch.inputs.at(0).data;
  void* out = launch.outputs.at(0).data;
  if (plan.words && pointer_alignment(in, 16) == 16 && pointer_alignment(out, 16) == 16) {
    std::visit(
        [&](const auto& p) {
          using Index = typename std::decay_t<decltype(p)>::IndexType;
          using W = typename std::decay_t<decltype(p)>::Word;
          launch_kernel(launch, pad_kernel<W, Index>, plan.word_grid, kThreads, 0, static_cast<const W*>(in),
                        static_cast<W*>(out), static_cast<Index>(plan.word_n), p);
        },
        plan.word_params);
    return;
  }
  std::visit([&](const auto& p) { run_pad(launch, plan, p); }, plan.params);
}

// ---- space_to_depth ----

// The sizes the kernel divides by, with their divisors fixed at prepare.
template <typename Index>
struct SpaceToDepthParams {
  Index c, h, w, block, top, left, filled;  // filled: c * block^2, the channels that hold input values
  Divisor<Index> channels, out_h, out_w, by_c, by_block;
};

// What space_to_depth writes: x's elements as they are (kCopy: W is a word of one element's bytes), or x's float values
// (W float, __half, __nv_bfloat16 or double) quantized by one f32 scale to i8 or e4m3, as the quantize kernels round
// them (`quantize_to`).
enum class SpaceToDepthOut : int { kCopy, kI8, kE4M3 };

template <typename W, SpaceToDepthOut kQ>
using SpaceToDepthElement = std::conditional_t<kQ == SpaceToDepthOut::kCopy, W, std::uint8_t>;

template <typename W, SpaceToDepthOut kQ>
__device__ __forceinline__ SpaceToDepthElement<W, kQ> space_to_depth_value(W v, float scale, float reciprocal) {
  constexpr bool kE4M3 = kQ == SpaceToDepthOut::kE4M3;
  if constexpr (kQ == SpaceToDepthOut::kCopy) {
    return v;
  } else if constexpr (std::is_same_v<W, double>) {
    return quantize_rounding::quantize_one<W, kE4M3>(v, scale);
  } else if constexpr (kE4M3) {
    return quantize_rounding::quantize_one_f32<W, true>(v, scale);
  } else {
    return quantize_rounding::quantize_i8_by_reciprocal<W>(v, scale, reciprocal);
  }
}

// Each thread writes kOut consecutive elements of the output's last axis as one word V (kOut = 1 when V is one
// element): with output_layout "nhwc", channels of one cell (the cell's indices divided once per thread, each channel's
// source from the divisors by C and block); with "nchw", columns of one channel row. Padding and channels past `filled`
// are zero (quantized: the zero byte, i8's and e4m3's zero).
template <typename W, typename V, typename Index, bool kNhwc, SpaceToDepthOut kQ>
__global__ void space_to_depth_kernel(const W* __restrict__ in, V* __restrict__ out, Index words,
                                      SpaceToDepthParams<Index> p, const float* __restrict__ scale) {
  wait_for_preceding_steps();
  using E = SpaceToDepthElement<W, kQ>;
  constexpr int kOut = static_cast<int>(sizeof(V) / sizeof(E));
  const float q = kQ == SpaceToDepthOut::kCopy ? 1.0F : *scale;
  const float reciprocal = quantize_rounding::i8_reciprocal(q);
  for (Index t = global_thread<Index>(); t < words; t += grid_threads<Index>()) {
    const Index o = t * kOut;
    Index n, k0, i, j0;
    if constexpr (kNhwc) {
      const Index pixel = p.channels.div(o);
      k0 = o - pixel * p.channels.d;
      const Index row = p.out_w.div(pixel);
      j0 = pixel - row * p.out_w.d;
      n = p.out_h.div(row);
      i = row - n * p.out_h.d;
    } else {
      const Index row = p.out_w.div(o);
      j0 = o - row * p.out_w.d;
      const Index plane = p.out_h.div(row);
      i = row - plane * p.out_h.d;
      n = p.channels.div(plane);
      k0 = plane - n * p.channels.d;
    }
    // Channel k0 + e comes from channel ch of element (by, bx) of the cell: divided out once, then stepped (the
    // channels of one output word run through x's channels, then the cell's columns, then its rows).
    const Index cell0 = p.by_c.div(k0);
    Index ch = k0 - cell0 * p.c;
    Index by = p.by_block.div(cell0);
    Index bx = cell0 - by * p.block;
    // Every element's load first (predicated, so that all of them are in flight together), then the values.
    W raw[kOut];
    bool inside[kOut];
#pragma unroll
    for (int e = 0; e < kOut; ++e) {
      const Index k = kNhwc ? k0 + e : k0;
      const Index j = kNhwc ? j0 : j0 + e;
      const Index y = i * p.block + by - p.top;
      const Index x = j * p.block + bx - p.left;
      inside[e] = k < p.filled && y >= 0 && y < p.h && x >= 0 && x < p.w;
      raw[e] = inside[e] ? in[((n * p.c + ch) * p.h + y) * p.w + x] : W{};
      if constexpr (kNhwc) {
        if (++ch == p.c) {
          ch = 0;
          if (++bx == p.block) {
            bx = 0;
            ++by;
          }
        }
      }
    }
    E v[kOut];
#pragma unroll
    for (int e = 0; e < kOut; ++e) v[e] = inside[e] ? space_to_depth_value<W, kQ>(raw[e], q, reciprocal) : E{};
    if constexpr (kOut == 1) {
      out[t] = v[0];
    } else {
      V word;
      memcpy(&word, v, sizeof word);
      out[t] = word;
    }
  }
}

struct SpaceToDepthPlan {
  std::int64_t n = 0;           // output elements
  std::size_t element = 1;      // bytes of an input element
  std::size_t out_element = 1;  // bytes of an output element (1 when quantized)
  SpaceToDepthOut quantize = SpaceToDepthOut::kCopy;
  bool nhwc = false;
  bool whole_words = false;  // the output's rows are whole 16-byte words (the address is tested at launch)
  std::variant<SpaceToDepthParams<std::int32_t>, SpaceToDepthParams<std::int64_t>> params;
};

SpaceToDepthPlan prepare_space_to_depth(const StepLaunch& launch) {
  const DeviceTensor& x = launch.inputs.at(0);
  const DeviceTensor& out = launch.outputs.at(0);
  SpaceToDepthPlan plan;
  plan.n = volume(out.shape);
  plan.element = element_size(x.dtype);
  plan.out_element = element_size(out.dtype);
  if (out.dtype != x.dtype) {  // `quantize_to`: a float x, an i8 or e4m3 result
    plan.quantize = out.dtype == DataType::kI8 ? SpaceToDepthOut::kI8 : SpaceToDepthOut::kE4M3;
  }
  plan.nhwc = launch.attrs->get_string("output_layout", "nchw") == "nhwc";
  const std::int64_t block = launch.attrs->get_int("block_size");
  const auto pads = launch.attrs->get_ints("pads", std::vector<std::int64_t>{0, 0, 0, 0});
  const std::int64_t channels = out.shape[plan.nhwc ? 3 : 1];
  const std::int64_t out_h = out.shape[plan.nhwc ? 1 : 2], out_w = out.shape[plan.nhwc ? 2 : 3];
  plan.whole_words = plan.out_element <= 8 && (out.shape[3] * static_cast<std::int64_t>(plan.out_element)) % 16 == 0;
  auto make = [&](auto index) {
    using Index = decltype(index);
    SpaceToDepthParams<Index> p{};
    p.c = static_cast<Index>(x.shape[1]);
    p.h = static_cast<Index>(x.shape[2]);
    p.w = static_cast<Index>(x.shape[3]);
    p.block = static_cast<Index>(block);
    p.top = static_cast<Index>(pads.at(0));
    p.left = static_cast<Index>(pads.at(1));
    p.filled = static_cast<Index>(x.shape[1] * block * block);
    p.channels = Divisor<Index>(std::max<std::int64_t>(channels, 1));
    p.out_h = Divisor<Index>(std::max<std::int64_t>(out_h, 1));
    p.out_w = Divisor<Index>(std::max<std::int64_t>(out_w, 1));
    p.by_c = Divisor<Index>(std::max<std::int64_t>(x.shape[1], 1));
    p.by_block = Divisor<Index>(block);
    plan.params = p;
  };
  // Indices reach the larger of the two volumes plus the padding's reach (a block and the pads, well below 2^24).
  if (fits_index32(std::max(plan.n, volume(x.shape)) + block * (1 + pads.at(0) + pads.at(1)))) {
    make(std::int32_t{0});
  } else {
    make(std::int64_t{0});
  }
  return plan;
}

// W: a word of one input element (kCopy) or its float type (quantized).
template <typename W, SpaceToDepthOut kQ, typename Index>
void run_space_to_depth(const StepLaunch& launch, const SpaceToDepthPlan& plan, const SpaceToDepthParams<Index>& p) {
  using E = SpaceToDepthElement<W, kQ>;
  const auto* in = static_cast<const W*>(launch.inputs.at(0).data);
  const float* scale = kQ == SpaceToDepthOut::kCopy ? nullptr : static_cast<const float*>(launch.inputs.at(1).data);
  void* out = launch.outputs.at(0).data;
  const bool words = plan.whole_words && address_word(out) == 16;
  const std::int64_t threads = words ? plan.n / static_cast<std::int64_t>(16 / sizeof(E)) : plan.n;
  const unsigned grid = grid_for(threads);
  auto go = [&](auto v, auto nhwc) {
    using V = decltype(v);
    launch_kernel(launch, space_to_depth_kernel<W, V, Index, decltype(nhwc)::value, kQ>, grid, kThreads, 0, in,
                  static_cast<V*>(out), static_cast<Index>(threads), p, scale);
  };
  if (words && plan.nhwc) {
    go(uint4{}, std::true_type{});
  } else if (words) {
    go(uint4{}, std::false_type{});
  } else if (plan.nhwc) {
    go(E{}, std::true_type{});
  } else {
    go(E{}, std::false_type{});
  }
}

void launch_space_to_depth(const StepLaunch& launch, const SpaceToDepthPlan& plan) {
  if (plan.n == 0) return;
  bool handled = false;
  if (plan.quantize == SpaceToDepthOut::kCopy) {
    handled = dispatch_element_word(plan.element, [&](auto tag) {
      using W = typename decltype(tag)::type;
      std::visit([&](const auto& p) { run_space_to_depth<W, SpaceToDepthOut::kCopy>(launch, plan, p); }, plan.params);
    });
  } else {
    handled = dispatch_float(launch.inputs.at(0).dtype, [&](auto tag) {
      using W = decltype(tag);
      std::visit(
          [&](const auto& p) {
            if (plan.quantize == SpaceToDepthOut::kI8) {
              run_space_to_depth<W, SpaceToDepthOut::kI8>(launch, plan, p);
            } else {
              run_space_to_depth<W, SpaceToDepthOut::kE4M3>(launch, plan, p);
            }
          },
          plan.params);
    });
  }
  if (!handled) launch.attrs->fail("unsupported dtype for the CUDA kernel");
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

// space_to_depth moving elements (one input), or quantizing a float x by its f32 output scale to i8 or e4m3.
bool supports_space_to_depth(const graph::Graph& graph, const graph::Layer& layer, Precision precision) {
  return supports_any(graph, layer, precision) && !has_tensor(layer, 1);
}
bool supports_quantized_space_to_depth(const graph::Graph& graph, const graph::Layer& layer, Precision precision) {
  if (!supports_any(graph, layer, precision) || !has_tensor(layer, 1)) return false;
  const DataType x = input_dtype(graph, layer, 0), out = graph.tensor(layer.outputs.at(0)).dtype;
  return (x == DataType::kF32 || x == DataType::kF16 || x == DataType::kBF16 || x == DataType::kF64) &&
         input_dtype(graph, layer, 1) == DataType::kF32 && (out == DataType::kI8 || out == DataType::kF8E4M3);
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
      prepared_kernel<prepare_same_order, launch_same_order>("reshape_any_copy", "reshape", supports_any),
      prepared_kernel<prepare_same_order, launch_same_order>("squeeze_any_copy", "squeeze", supports_any),
      prepared_kernel<prepare_same_order, launch_same_order>("unsqueeze_any_copy", "unsqueeze", supports_any),
      prepared_kernel<prepare_transpose, launch_strided_copy>("transpose_any_strided", "transpose",
                                                              supports_input_rank8),
      prepared_kernel<prepare_slice, launch_strided_copy>("slice_any_strided", "slice", supports_input_rank8),
      prepared_kernel<prepare_concat, launch_concat>("concat_any_copy", "concat", supports_concat),
      prepared_kernel<prepare_split, launch_split>("split_any_copy", "split", supports_any),
      prepared_kernel<prepare_gather, launch_gather>("gather_any_i32i64_rows", "gather", supports_gather),
      prepared_kernel<prepare_expand, launch_strided_copy>("expand_any_strided", "expand", supports_output_rank8),
      prepared_kernel<prepare_pad, launch_pad>("pad_any_indexed", "pad", supports_pad),
      prepared_kernel<prepare_space_to_depth, launch_space_to_depth>("space_to_depth_any_gather", "space_to_depth",
                                                                     supports_space_to_depth),
      prepared_kernel<prepare_space_to_depth, launch_space_to_depth>(
          "space_to_depth_quantized_gather", "space_to_depth", supports_quantized_space_to_depth),
  };
  kernels.insert(kernels.end(), entries.begin(), entries.end());
}

}  // namespace tensoracle::cuda
