// CPU reference kernels of the transformer family.
#include <cmath>
#include <limits>
#include <string>

#include "backends/cpu/kernel_context.hpp"
#include "backends/cpu/kernels/numeric.hpp"

namespace tensoracle::cpu {
namespace {

// Every float dtype is computed the same way: read as double, compute in double, round once per
// output element with from_f64. So the dtype "switch" is to_f64/from_f64 at the boundary.

// Where element (b, h, s, c) of a [B, H, S, D] view lives: offset + b·sb + h·sh + s·ss + c.
struct HeadStrides {
  std::int64_t offset = 0, sb = 0, sh = 0, ss = 0;
  std::int64_t at(std::int64_t b, std::int64_t h, std::int64_t s) const { return offset + b * sb + h * sh + s * ss; }
};

// [B, H, S, D] laid out as bhsd or bshd.
HeadStrides head_strides(bool bshd, std::int64_t heads, std::int64_t seq, std::int64_t d) {
  if (bshd) return {0, seq * heads * d, d, heads * d};
  return {0, heads * seq * d, seq * d, d};
}

// Softmax(q·kᵀ·scale + mask)·v per (batch, head, query row), in double, composed exactly as the
// math (non-fused) path of torch's scaled_dot_product_attention: a row whose scores are all -inf
// gives NaN, as softmax does. Layouts (the "layout" attribute): bhsd (q [B, Hq, Sq, D], the output
// [B, Hq, Sq, Dv]), bshd (heads and sequence swapped, output too) and packed (q, k and v all from one
// [B, S, (heads + 2 kv_heads)·D] tensor, output [B, S, Hq, D]).
void attention_kernel(KernelContext& ctx) {
  const TensorRef& q = ctx.input(0);
  const TensorRef& k = ctx.input(1);
  const TensorRef& v = ctx.input(2);
  const TensorRef& out = ctx.output(0);
  const std::string layout = ctx.get_string("layout", "bhsd");
  std::int64_t batch = q.shape[0], hq = 0, sq = 0, d = 0, hkv = 0, skv = 0, dv = 0;
  HeadStrides qs, ks, vs, os;
  if (layout == "packed") {
    hq = ctx.get_int("heads");
    hkv = ctx.get_int("kv_heads");
    sq = skv = q.shape[1];
    const std::int64_t width = q.shape[2];
    d = dv = width / (hq + 2 * hkv);
    qs = {0, sq * width, d, width};
    ks = {hq * d, sq * width, d, width};
    vs = {(hq + hkv) * d, sq * width, d, width};
    os = head_strides(true, hq, sq, dv);
  } else {
    const bool bshd = layout == "bshd";
    const int h_axis = bshd ? 2 : 1, s_axis = bshd ? 1 : 2;
    hq = q.shape[h_axis];
    sq = q.shape[s_axis];
    d = q.shape[3];
    hkv = k.shape[h_axis];
    skv = k.shape[s_axis];
    dv = v.shape[3];
    qs = head_strides(bshd, hq, sq, d);
    ks = head_strides(bshd, hkv, skv, d);
    vs = head_strides(bshd, hkv, skv, dv);
    os = head_strides(bshd, hq, sq, dv);
  }
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
