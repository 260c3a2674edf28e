// CPU reference kernels of the data_movement family.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "backends/cpu/kernel_context.hpp"
#include "backends/cpu/kernels/numeric.hpp"
#include "backends/cpu/kernels/quantized_rounding.hpp"
#include "core/bytes.hpp"

namespace tensoracle::cpu {
namespace {

// Data movement never changes a value, so every dtype is handled alike: each output element is a
// byte-exact copy of one input element (NaN payloads and -0 included). No per-dtype switch needed.
void copy_element(const TensorRef& out, std::size_t out_index, const TensorRef& in, std::size_t in_index) {
  const std::size_t size = element_size(out.dtype);
  std::memcpy(out.bytes.data() + out_index * size, in.bytes.data() + in_index * size, size);
}

// Fills `out` by visiting its elements in row-major order; `source(coords)` gives the flat input
// index of the element at output coordinates `coords` (or -1 for a fill value).
template <typename Source>
void gather_elements(const TensorRef& out, const TensorRef& in, Source source, const TensorRef* fill = nullptr) {
  const std::size_t n = out.size();
  std::vector<std::int64_t> coords(static_cast<std::size_t>(out.shape.rank()), 0);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t src = source(coords);
    if (src < 0) {
      copy_element(out, i, *fill, 0);
    } else {
      copy_element(out, i, in, static_cast<std::size_t>(src));
    }
    for (int a = out.shape.rank() - 1; a >= 0; --a) {
      auto& c = coords[static_cast<std::size_t>(a)];
      if (++c < out.shape[a]) break;
      c = 0;
    }
  }
}

std::int64_t normalize(std::int64_t axis, int rank) { return axis < 0 ? axis + rank : axis; }

// reshape, squeeze, unsqueeze: the row-major element order is unchanged.
void same_order_kernel(KernelContext& ctx) {
  const TensorRef& x = ctx.input(0);
  const TensorRef& out = ctx.output(0);
  if (out.bytes.size() != x.bytes.size()) ctx.fail("internal error: the output holds a different number of elements");
  std::copy(x.bytes.begin(), x.bytes.end(), out.bytes.begin());
}

void transpose_kernel(KernelContext& ctx) {
  const TensorRef& x = ctx.input(0);
  const TensorRef& out = ctx.output(0);
  const auto perm = ctx.get_ints("perm");
  const auto in_strides = row_major_strides(x.shape);
  std::vector<std::int64_t> strides;  // input stride of each output axis
  for (auto p : perm) strides.push_back(in_strides[static_cast<std::size_t>(normalize(p, x.shape.rank()))]);
  gather_elements(out, x, [&](const std::vector<std::int64_t>& c) {
    std::int64_t src = 0;
    for (std::size_t a = 0; a < c.size(); ++a) src += c[a] * strides[a];
    return src;
  });
}

void slice_kernel(KernelContext& ctx) {
  const TensorRef& x = ctx.input(0);
  const TensorRef& out = ctx.output(0);
  const int rank = x.shape.rank();
  const auto starts = ctx.get_ints("starts");
  auto axes = ctx.get_ints("axes", std::vector<std::int64_t>{});
  auto steps = ctx.get_ints("steps", std::vector<std::int64_t>{});
  if (axes.empty()) {
    for (std::size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<std::int64_t>(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  // Per input axis: the first index taken and the step (the output shape gives the count).
  std::vector<std::int64_t> first(static_cast<std::size_t>(rank), 0), step(static_cast<std::size_t>(rank), 1);
  for (std::size_t i = 0; i < axes.size(); ++i) {
    const auto a = static_cast<std::size_t>(normalize(axes[i], rank));
    const std::int64_t d = x.shape[static_cast<int>(a)];
    std::int64_t s = starts[i] < 0 ? starts[i] + d : starts[i];
    s = steps[i] > 0 ? std::clamp<std::int64_t>(s, 0, d) : std::min<std::int64_t>(std::max<std::int64_t>(s, 0), d - 1);
    first[a] = s;
    step[a] = steps[i];
  }
  const auto strides = row_major_strides(x.shape);
  gather_elements(out, x, [&](const std::vector<std::int64_t>& c) {
    std::int64_t src = 0;
    for (std::size_t a = 0; a < c.size(); ++a) src += (first[a] + c[a] * step[a]) * strides[a];
    return src;
  });
}

void concat_kernel(KernelContext& ctx) {
  const TensorRef& out = ctx.output(0);
  const int rank = out.shape.rank();
  const auto axis = normalize(ctx.get_int("axis"), rank);
  // Rows of `outer` blocks: each input contributes a contiguous run per block.
  std::int64_t outer = 1, inner = 1;
  for (int a = 0; a < axis; ++a) outer *= out.shape[a];
  for (int a = static_cast<int>(axis) + 1; a < rank; ++a) inner *= out.shape[a];
  const std::size_t size = element_size(out.dtype);
  std::size_t offset = 0;  // elements of one output block written so far
  const auto block = static_cast<std::size_t>(out.shape[static_cast<int>(axis)] * inner);
  for (std::size_t i = 0; i < ctx.num_inputs(); ++i) {
    const TensorRef& x = ctx.input(i);
    const auto run = static_cast<std::size_t>(x.shape[static_cast<int>(axis)] * inner);
    for (std::int64_t o = 0; o < outer; ++o) {
      const auto ou = static_cast<std::size_t>(o);
      copy_bytes(out.bytes.data() + (ou * block + offset) * size, x.bytes.data() + ou * run * size, run * size);
    }
    offset += run;
  }
}

void split_kernel(KernelContext& ctx) {
  const TensorRef& x = ctx.input(0);
  const int rank = x.shape.rank();
  const auto axis = normalize(ctx.get_int("axis"), rank);
  std::int64_t outer = 1, inner = 1;
  for (int a = 0; a < axis; ++a) outer *= x.shape[a];
  for (int a = static_cast<int>(axis) + 1; a < rank; ++a) inner *= x.shape[a];
  const std::size_t size = element_size(x.dtype);
  const auto block = static_cast<std::size_t>(x.shape[static_cast<int>(axis)] * inner);
  std::size_t offset = 0;
  for (std::size_t i = 0; i < ctx.num_outputs(); ++i) {
    const TensorRef& out = ctx.output(i);
    const auto run = static_cast<std::size_t>(out.shape[static_cast<int>(axis)] * inner);
    for (std::int64_t o = 0; o < outer; ++o) {
      const auto ou = static_cast<std::size_t>(o);
      copy_bytes(out.bytes.data() + ou * run * size, x.bytes.data() + (ou * block + offset) * size, run * size);
    }
    offset += run;
  }
}

void gather_kernel(KernelContext& ctx) {
  const TensorRef& data = ctx.input(0);
  const TensorRef& indices = ctx.input(1);
  const TensorRef& out = ctx.output(0);
  const int rank = data.shape.rank();
  const auto axis = static_cast<int>(normalize(ctx.get_int("axis", 0), rank));
  const std::int64_t dim = data.shape[axis];
  // Validate and wrap every index first, so a bad index fails before anything is written.
  std::vector<std::int64_t> idx = to_i64(indices);
  for (std::size_t i = 0; i < idx.size(); ++i) {
    const std::int64_t v = idx[i];
    if (v < -dim || v >= dim) {
      ctx.fail(fmt::format("index {} (element {} of indices) is out of range for axis {} of size {} of data", v, i,
                           axis, dim));
    }
    if (v < 0) idx[i] = v + dim;
  }
  std::int64_t outer = 1, inner = 1;
  for (int a = 0; a < axis; ++a) outer *= data.shape[a];
  for (int a = axis + 1; a < rank; ++a) inner *= data.shape[a];
  const auto size = element_size(data.dtype);
  const auto run = static_cast<std::size_t>(inner) * size;
  std::size_t o = 0;  // output element index
  for (std::int64_t b = 0; b < outer; ++b) {
    for (std::int64_t index : idx) {
      const auto src = static_cast<std::size_t>((b * dim + index) * inner);
      copy_bytes(out.bytes.data() + o * size, data.bytes.data() + src * size, run);
      o += static_cast<std::size_t>(inner);
    }
  }
}

void expand_kernel(KernelContext& ctx) {
  const TensorRef& x = ctx.input(0);
  const TensorRef& out = ctx.output(0);
  const auto map = broadcast_indices(x.shape, out.shape);
  for (std::size_t i = 0; i < map.size(); ++i) copy_element(out, i, x, static_cast<std::size_t>(map[i]));
}

void pad_kernel(KernelContext& ctx) {
  const TensorRef& x = ctx.input(0);
  const TensorRef& out = ctx.output(0);
  const int rank = x.shape.rank();
  const auto pads = ctx.get_ints("pads");
  const std::string mode = ctx.get_string("mode", "constant");
  // The fill value rounded to the tensor's dtype once (integers truncate, bool is value != 0).
  HostTensor fill_value(x.dtype, Dims{1});
  const TensorRef fill(fill_value);
  from_f64(fill, {ctx.get_float("value", 0.0)});
  const auto strides = row_major_strides(x.shape);
  gather_elements(
      out, x,
      [&](const std::vector<std::int64_t>& c) -> std::int64_t {
        std::int64_t src = 0;
        for (int a = 0; a < rank; ++a) {
          const auto ua = static_cast<std::size_t>(a);
          const std::int64_t d = x.shape[a];
          std::int64_t i = c[ua] - pads[ua];
          if (i < 0 || i >= d) {
            if (mode == "constant") return -1;
            if (mode == "edge") {
              i = std::clamp<std::int64_t>(i, 0, d - 1);
            } else {  // reflect about the edge elements (pads < d, checked by the shape function)
              i = i < 0 ? -i : 2 * (d - 1) - i;
            }
          }
          src += i * strides[ua];
        }
        return src;
      },
      &fill);
}

// Output channel (by * block + bx) * C + c of cell (i, j) holds x[n, c, i * block + by - top, j * block + bx - left];
// positions in the padding and channels past C * block^2 are zero.
// With `quantize_to`: the moved values quantized by output_scale (input 1) as quantize rounds them.
void space_to_depth_kernel(KernelContext& ctx) {
  const TensorRef& x = ctx.input(0);
  const TensorRef& result = ctx.output(0);
  HostTensor moved;
  if (ctx.has_input(1)) moved = HostTensor(x.dtype, result.shape);
  const TensorRef moved_ref(moved);
  const TensorRef& out = ctx.has_input(1) ? moved_ref : result;
  const std::int64_t block = ctx.get_int("block_size");
  const auto pads = ctx.get_ints("pads", std::vector<std::int64_t>{0, 0, 0, 0});
  const bool nhwc = ctx.get_string("output_layout", "nchw") == "nhwc";
  const std::int64_t c = x.shape[1], h = x.shape[2], w = x.shape[3];
  HostTensor zero_value(x.dtype, Dims{1});  // zero bytes: zero in every dtype
  const TensorRef zero(zero_value);
  gather_elements(
      out, x,
      [&](const std::vector<std::int64_t>& o) -> std::int64_t {
        const std::int64_t k = nhwc ? o[3] : o[1], i = nhwc ? o[1] : o[2], j = nhwc ? o[2] : o[3];
        if (k >= c * block * block) return -1;
        const std::int64_t cell = k / c, ch = k % c;
        const std::int64_t y = i * block + cell / block - pads[0], xw = j * block + cell % block - pads[1];
        if (y < 0 || y >= h || xw < 0 || xw >= w) return -1;
        return ((o[0] * c + ch) * h + y) * w + xw;
      },
      &zero);
  if (ctx.has_input(1)) {
    std::vector<double> values = to_f64(out);
    quantize_in_place(values, to_f64(ctx.input(1))[0], result.dtype);
    from_f64(result, values);
  }
}

}  // namespace

void register_data_movement_kernels(std::vector<KernelEntry>& kernels) {
  kernels.push_back({"reshape", same_order_kernel});
  kernels.push_back({"squeeze", same_order_kernel});
  kernels.push_back({"unsqueeze", same_order_kernel});
  kernels.push_back({"transpose", transpose_kernel});
  kernels.push_back({"slice", slice_kernel});
  kernels.push_back({"concat", concat_kernel});
  kernels.push_back({"split", split_kernel});
  kernels.push_back({"gather", gather_kernel});
  kernels.push_back({"expand", expand_kernel});
  kernels.push_back({"pad", pad_kernel});
  kernels.push_back({"space_to_depth", space_to_depth_kernel});
}

}  // namespace tensoracle::cpu
