// The attention op's layouts as [B, H, S, D] views: axis order, sizes and element strides of q, k, v and the output.
// Shared by the op's shape function (src/graph/ops/transformer.cpp) and the CPU and CUDA kernels, so header-only C++17.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tensoracle/dims.hpp"

namespace tensoracle::graph {

// The "layout" attribute: "bhsd" (the default) q [B, Hq, Sq, D], k [B, Hkv, Skv, D], v [B, Hkv, Skv, Dv] and the
// output [B, Hq, Sq, Dv]; "bshd" the same with heads and sequence swapped, output too; "packed" q, k and v read from
// one [B, S, (Hq + 2 Hkv)·D] tensor (q's heads, then k's, then v's), the output [B, S, Hq, D].
enum class AttentionLayout { kBhsd, kBshd, kPacked };

// The layout of a "layout" attribute value; nullopt for any other name.
inline std::optional<AttentionLayout> parse_attention_layout(const std::string& name) {
  if (name == "bhsd") return AttentionLayout::kBhsd;
  if (name == "bshd") return AttentionLayout::kBshd;
  if (name == "packed") return AttentionLayout::kPacked;
  return std::nullopt;
}

// Whether the rank-4 tensors of the layout are [B, S, H, D] (sequence before heads): bshd's q, k, v and output, and
// packed's output.
inline bool attention_output_seq_major(AttentionLayout layout) { return layout != AttentionLayout::kBhsd; }

// The dims of a rank-4 tensor in [B, H, S, D] order when `seq_major` ([B, S, H, D]) swaps its middle axes, and back:
// the swap is its own inverse. Shape is std::vector<DimId> (the shape function) or Dims.
template <typename Shape>
Shape attention_bhsd_order(const Shape& shape, bool seq_major) {
  return seq_major ? Shape{shape[0], shape[2], shape[1], shape[3]} : shape;
}

// A packed tensor's last dim holds this many head vectors of D each.
inline std::int64_t attention_packed_parts(std::int64_t heads, std::int64_t kv_heads) { return heads + 2 * kv_heads; }

// Where element (b, h, s, c) of a [B, H, S, D] view lives: offset + b·batch + h·head + s·seq + c (elements).
struct AttentionStrides {
  std::int64_t offset = 0, batch = 0, head = 0, seq = 0;
  std::int64_t at(std::int64_t b, std::int64_t h, std::int64_t s) const {
    return offset + b * batch + h * head + s * seq;
  }
};

// A contiguous [B, H, S, D] tensor laid out as [B, H, S, D], or as [B, S, H, D] when `seq_major`.
inline AttentionStrides attention_strides(bool seq_major, std::int64_t heads, std::int64_t seq, std::int64_t d) {
  if (seq_major) return {0, seq * heads * d, d, heads * d};
  return {0, heads * seq * d, seq * d, d};
}

// One attention at concrete shapes: the [B, Hq, Sq, D] / [B, Hkv, Skv, D] / [B, Hkv, Skv, Dv] views of q, k and v,
// and where the elements of each of them and of the output [B, Hq, Sq, Dv] view live.
struct AttentionGeometry {
  std::int64_t b = 0, hq = 0, hkv = 0, sq = 0, skv = 0, d = 0, dv = 0;
  AttentionStrides q, k, v, out;
};

// The geometry from the shapes of q, k and v (k and v are not read for packed, whose one tensor is q). The caller has
// checked the ranks (3 for packed, else 4) and, for packed, that heads and kv_heads (read only for packed) are
// positive; the shape function checks the rest.
inline AttentionGeometry attention_geometry(AttentionLayout layout, std::int64_t heads, std::int64_t kv_heads,
                                            const Dims& q, const Dims& k, const Dims& v) {
  AttentionGeometry g;
  g.b = q[0];
  if (layout == AttentionLayout::kPacked) {
    g.hq = heads;
    g.hkv = kv_heads;
    g.sq = g.skv = q[1];
    const std::int64_t width = q[2];
    g.d = g.dv = width / attention_packed_parts(heads, kv_heads);
    g.q = AttentionStrides{0, g.sq * width, g.d, width};
    g.k = AttentionStrides{g.hq * g.d, g.sq * width, g.d, width};
    g.v = AttentionStrides{(g.hq + g.hkv) * g.d, g.sq * width, g.d, width};
  } else {
    const bool bshd = layout == AttentionLayout::kBshd;
    const Dims qv = attention_bhsd_order(q, bshd), kv = attention_bhsd_order(k, bshd),
               vv = attention_bhsd_order(v, bshd);
    g.hq = qv[1];
    g.sq = qv[2];
    g.d = qv[3];
    g.hkv = kv[1];
    g.skv = kv[2];
    g.dv = vv[3];
    g.q = attention_strides(bshd, g.hq, g.sq, g.d);
    g.k = attention_strides(bshd, g.hkv, g.skv, g.d);
    g.v = attention_strides(bshd, g.hkv, g.skv, g.dv);
  }
  g.out = attention_strides(attention_output_seq_major(layout), g.hq, g.sq, g.dv);
  return g;
}

}  // namespace tensoracle::graph
