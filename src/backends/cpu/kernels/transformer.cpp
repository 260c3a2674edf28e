// CPU reference kernels of the transformer family.
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "backends/cpu/kernel_context.hpp"
#include "backends/cpu/kernels/numeric.hpp"
#include "graph/ops/attention_layout.hpp"

namespace tensoracle::cpu {
namespace {

// Every float dtype is computed the same way: read as double, compute in double, round once per
// output element with from_f64. So the dtype "switch" is to_f64/from_f64 at the boundary.

// Softmax(q·kᵀ·scale + mask)·v per (batch, head, query row), in double, composed exactly as the
// math (non-fused) path of torch's scaled_dot_product_attention: a row whose scores are all -inf
// gives NaN, as softmax does. Layouts (the "layout" attribute): bhsd (q [B, Hq, Sq, D], the output
// [B, Hq, Sq, Dv]), bshd (heads and sequence swapped, output too) and packed (q, k and v all from one
// [B, S, (heads + 2 kv_heads)·D] tensor, output [B, S, Hq, D]); graph/ops/attention_layout.hpp maps them to
// [B, H, S, D] views.
void attention_kernel(KernelContext& ctx) {
  const TensorRef& q = ctx.input(0);
  const TensorRef& k = ctx.input(1);
  const TensorRef& v = ctx.input(2);
  const TensorRef& out = ctx.output(0);
  const std::string layout_name = ctx.get_string("layout", "bhsd");
  const std::optional<graph::AttentionLayout> layout = graph::parse_attention_layout(layout_name);
  if (!layout) ctx.fail(fmt::format("layout '{}' must be bhsd, bshd or packed", layout_name));
  std::int64_t heads = 0, kv_heads = 0;
  if (*layout == graph::AttentionLayout::kPacked) {
    heads = ctx.get_int("heads");
    kv_heads = ctx.get_int("kv_heads");
  }
  const graph::AttentionGeometry g = graph::attention_geometry(*layout, heads, kv_heads, q.shape, k.shape, v.shape);
  const std::int64_t batch = g.b, hq = g.hq, sq = g.sq, d = g.d, hkv = g.hkv, skv = g.skv, dv = g.dv;
  const graph::AttentionStrides &qs = g.q, &ks = g.k, &vs = g.v, &os = g.out;
  const bool causal = ctx.get_bool("causal", false);
  const double scale = ctx.has("scale") ? ctx.get_float("scale") : 1.0 / std::sqrt(static_cast<double>(d));
  // Query head h reads kv head h / group (grouped-query and multi-query attention).
  const std::int64_t group = hkv > 0 ? hq / hkv : 1;

  const std::vector<double> qv = to_f64(q), kv = to_f64(k), vv = to_f64(v);
  const bool has_mask = ctx.has_input(3);
  bool bool_mask = false;
  std::vector<double> mask_values;
  std::vector<std::int64_t> mask_index;  // for each score element, its mask element
  if (has_mask) {
    const TensorRef& mask = ctx.input(3);
    bool_mask = mask.dtype == DataType::kBool;
    mask_values = to_f64(mask);
    mask_index = broadcast_indices(mask.shape, Dims{batch, hq, sq, skv});
  }
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();

  std::vector<double> result(out.size(), 0.0);
  std::vector<double> scores(static_cast<std::size_t>(skv));
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t h = 0; h < hq; ++h) {
      const std::int64_t kh = h / group;
      for (std::int64_t i = 0; i < sq; ++i) {
        const double* qrow = qv.data() + qs.at(b, h, i);
        double row_max = kNegInf;
        for (std::int64_t j = 0; j < skv; ++j) {
          const double* krow = kv.data() + ks.at(b, kh, j);
          double dot = 0.0;
          for (std::int64_t c = 0; c < d; ++c) dot += qrow[c] * krow[c];
          double s = dot * scale;
          if (has_mask) {
            const double m = mask_values[static_cast<std::size_t>(
                mask_index[static_cast<std::size_t>(((b * hq + h) * sq + i) * skv + j)])];
            if (bool_mask) {
              if (m == 0.0) s = kNegInf;
            } else {
              s += m;
            }
          }
          if (causal && j > i) s = kNegInf;
          scores[static_cast<std::size_t>(j)] = s;
          row_max = std::max(row_max, s);
        }
        // exp(s - max) / sum: all -inf gives exp(NaN) = NaN, as torch's softmax.
        double sum = 0.0;
        for (auto& s : scores) {
          s = std::exp(s - row_max);
          sum += s;
        }
        double* o = result.data() + os.at(b, h, i);
        for (std::int64_t j = 0; j < skv; ++j) {
          const double p = scores[static_cast<std::size_t>(j)] / sum;
          const double* vrow = vv.data() + vs.at(b, kh, j);
          for (std::int64_t c = 0; c < dv; ++c) o[c] += p * vrow[c];
        }
      }
    }
  }
  from_f64(out, result);
}

// Rotary position embedding: position p = s + position_offset, θᵢ = p·base^(−2i/rotary_dim) for
// i < rotary_dim/2, rotating the pairs (x[i], x[i + rotary_dim/2]) (halves, Llama/NeoX) or
// (x[2i], x[2i+1]) (interleaved, GPT-J); dims past rotary_dim pass through.
void rotary_kernel(KernelContext& ctx) {
  const TensorRef& x = ctx.input(0);
  const TensorRef& out = ctx.output(0);
  const std::int64_t rows = x.shape[0] * x.shape[1], seq = x.shape[2], d = x.shape[3];
  const double base = ctx.get_float("base", 10000.0);
  const std::int64_t rotary_dim = ctx.get_int("rotary_dim", 0) == 0 ? d : ctx.get_int("rotary_dim");
  const bool interleaved = ctx.get_bool("interleaved", false);
  const std::int64_t offset = ctx.get_int("position_offset", 0);
  const std::int64_t half = rotary_dim / 2;

  std::vector<double> inv_freq(static_cast<std::size_t>(half));
  for (std::int64_t i = 0; i < half; ++i) {
    // 1 / base^(2i/rotary_dim), written as Hugging Face does so references agree to the last bit or two.
    inv_freq[static_cast<std::size_t>(i)] =
        1.0 / std::pow(base, 2.0 * static_cast<double>(i) / static_cast<double>(rotary_dim));
  }
  std::vector<double> r = to_f64(x);  // pass-through dims keep their values
  const std::vector<double> in = r;
  for (std::int64_t row = 0; row < rows; ++row) {
    for (std::int64_t s = 0; s < seq; ++s) {
      const double p = static_cast<double>(s) + static_cast<double>(offset);
      const std::int64_t base_index = (row * seq + s) * d;
      for (std::int64_t i = 0; i < half; ++i) {
        const double theta = p * inv_freq[static_cast<std::size_t>(i)];
        const double c = std::cos(theta), sn = std::sin(theta);
        const std::int64_t i1 = base_index + (interleaved ? 2 * i : i);
        const std::int64_t i2 = base_index + (interleaved ? 2 * i + 1 : i + half);
        const double x1 = in[static_cast<std::size_t>(i1)], x2 = in[static_cast<std::size_t>(i2)];
        r[static_cast<std::size_t>(i1)] = x1 * c - x2 * sn;
        r[static_cast<std::size_t>(i2)] = x2 * c + x1 * sn;
      }
    }
  }
  from_f64(out, r);
}

}  // namespace

void register_transformer_kernels(std::vector<KernelEntry>& kernels) {
  kernels.push_back({"attention", attention_kernel});
  kernels.push_back({"rotary_embedding", rotary_kernel});
}

}  // namespace tensoracle::cpu
