// Op definitions (inputs, attributes, dtype and shape inference) of the transformer family.
#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "graph/op_def.hpp"
#include "graph/ops/attention_layout.hpp"

namespace tensoracle::graph {
namespace {

// ---- attention ----

// The [B, H, S, D] view of q, k and v in each layout: "bhsd" (the default) as given, "bshd" with heads and sequence
// swapped, "packed" one [B, S, (heads + 2 kv_heads) * D] tensor for all three (q heads, then k's, then v's).
struct AttentionView {
  std::vector<DimId> q, k, v;  // [B, H, S, D]
};

AttentionView attention_view(InferContext& ctx, const TensorType& q, const TensorType& k, const TensorType& v,
                             AttentionLayout layout) {
  if (layout == AttentionLayout::kBhsd) {
    ctx.require_rank(q, 4, "q [B, Hq, Sq, D]");
    ctx.require_rank(k, 4, "k [B, Hkv, Skv, D]");
    ctx.require_rank(v, 4, "v [B, Hkv, Skv, Dv]");
    return {q.shape, k.shape, v.shape};
  }
  if (layout == AttentionLayout::kBshd) {
    ctx.require_rank(q, 4, "q [B, Sq, Hq, D] (layout bshd)");
    ctx.require_rank(k, 4, "k [B, Skv, Hkv, D] (layout bshd)");
    ctx.require_rank(v, 4, "v [B, Skv, Hkv, Dv] (layout bshd)");
    return {attention_bhsd_order(q.shape, true), attention_bhsd_order(k.shape, true),
            attention_bhsd_order(v.shape, true)};
  }
  if (q.name != k.name || q.name != v.name) {
    ctx.fail(fmt::format("layout packed reads q, k and v from one tensor, but they are '{}', '{}' and '{}'", q.name,
                         k.name, v.name));
  }
  ctx.require_rank(q, 3, "qkv [B, S, (heads + 2 kv_heads) * D] (layout packed)");
  const std::int64_t heads = ctx.get_int("heads"), kv_heads = ctx.get_int("kv_heads");
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0) {
    ctx.fail(fmt::format("heads {} and kv_heads {} must be positive, heads a multiple of kv_heads", heads, kv_heads));
  }
  const auto width = ctx.value(q.shape[2]);
  const std::int64_t parts = attention_packed_parts(heads, kv_heads);
  if (!width || *width % parts != 0) {
    ctx.fail(fmt::format("the last dim of qkv '{}' {} must be a known multiple of heads + 2 kv_heads = {}", q.name,
                         ctx.shape_string(q.shape), parts));
  }
  const DimId d = ctx.constant(*width / parts);
  return {{q.shape[0], ctx.constant(heads), q.shape[1], d},
          {q.shape[0], ctx.constant(kv_heads), q.shape[1], d},
          {q.shape[0], ctx.constant(kv_heads), q.shape[1], d}};
}

std::vector<OutputType> infer_attention(InferContext& ctx) {
  const TensorType& q_in = ctx.input(0, "q");
  const TensorType& k_in = ctx.input(1, "k");
  const TensorType& v_in = ctx.input(2, "v");
  ctx.require_dtype(q_in, kFloatTypes, "q");
  ctx.require_same_dtype(q_in, k_in);
  ctx.require_same_dtype(q_in, v_in);
  const std::string layout_name = ctx.get_string("layout", "bhsd");
  const std::optional<AttentionLayout> layout = parse_attention_layout(layout_name);
  if (!layout) ctx.fail(fmt::format("layout '{}' must be bhsd, bshd or packed", layout_name));
  const AttentionView view = attention_view(ctx, q_in, k_in, v_in, *layout);
  const std::vector<DimId>& qs = view.q;
  const std::vector<DimId>& ks = view.k;
  const std::vector<DimId>& vs = view.v;
  (void)ctx.get_bool("causal", false);
  if (ctx.has("scale")) {
    const double scale = ctx.get_float("scale");
    if (!std::isfinite(scale)) ctx.fail(fmt::format("scale {} must be finite", scale));
  }
  auto shapes = [&] {
    return fmt::format("q '{}' {}, k '{}' {}, v '{}' {}", q_in.name, ctx.shape_string(q_in.shape), k_in.name,
                       ctx.shape_string(k_in.shape), v_in.name, ctx.shape_string(v_in.shape));
  };
  ctx.require_equal(qs[0], ks[0], fmt::format("the batch sizes of q and k differ ({})", shapes()));
  ctx.require_equal(qs[0], vs[0], fmt::format("the batch sizes of q and v differ ({})", shapes()));
  ctx.require_equal(ks[1], vs[1], fmt::format("the head counts of k and v differ ({})", shapes()));
  ctx.require_equal(ks[2], vs[2], fmt::format("the sequence lengths of k and v differ ({})", shapes()));
  ctx.require_equal(qs[3], ks[3], fmt::format("the head dims of q and k differ ({})", shapes()));
  const auto hq = ctx.value(qs[1]), hkv = ctx.value(ks[1]);
  if (hkv && *hkv == 0 && (!hq || *hq != 0)) ctx.fail(fmt::format("k has 0 heads ({})", shapes()));
  if (hq && hkv && *hkv != 0 && *hq % *hkv != 0) {
    ctx.fail(fmt::format("q's {} heads are not a multiple of k's {} heads ({})", *hq, *hkv, shapes()));
  }

  // Dims that may be symbolic: prefer a constant where one of the equal pair is known.
  auto pick = [&](DimId a, DimId b) { return ctx.value(a) ? a : b; };
  const DimId batch = pick(pick(qs[0], ks[0]), vs[0]);
  const DimId skv = pick(ks[2], vs[2]);
  const std::vector<DimId> scores{batch, qs[1], qs[2], skv};

  if (ctx.has_input(3)) {
    const TensorType& mask = ctx.input(3, "mask");
    if (mask.dtype != DataType::kBool && mask.dtype != q_in.dtype) {
      ctx.fail(fmt::format("mask '{}' has dtype {}; it must be bool (true = attend) or additive {} like q", mask.name,
                           to_string(mask.dtype), to_string(q_in.dtype)));
    }
    // The mask broadcasts to the scores [B, Hq, Sq, Skv]; it never enlarges them.
    auto bad_mask = [&] {
      ctx.fail(fmt::format("mask '{}' of shape {} can't be broadcast to the scores shape [B, Hq, Sq, Skv] = {}",
                           mask.name, ctx.shape_string(mask.shape), ctx.shape_string(scores)));
    };
    if (mask.rank() > 4) bad_mask();
    for (int i = 0; i < mask.rank(); ++i) {
      const DimId m = mask.shape[static_cast<std::size_t>(i)];
      const DimId t = scores[static_cast<std::size_t>(4 - mask.rank() + i)];
      auto vm = ctx.value(m), vt = ctx.value(t);
      if (vm && vt && *vm != 1 && *vm != *vt) bad_mask();
    }
  }
  // bhsd: [B, Hq, Sq, Dv]; bshd and packed: [B, Sq, Hq, Dv].
  const std::vector<DimId> out{batch, qs[1], qs[2], vs[3]};
  return {OutputType{q_in.dtype, attention_bhsd_order(out, attention_output_seq_major(*layout))}};
}

// ---- rotary_embedding ----

std::vector<OutputType> infer_rotary(InferContext& ctx) {
  const TensorType& x = ctx.input(0, "x");
  ctx.require_dtype(x, kFloatTypes, "x");
  ctx.require_rank(x, 4, "x [B, H, S, D]");
  const double base = ctx.get_float("base", 10000.0);
  if (!std::isfinite(base) || base <= 0) ctx.fail(fmt::format("base {} must be a positive finite number", base));
  (void)ctx.get_bool("interleaved", false);
  const std::int64_t offset = ctx.get_int("position_offset", 0);
  if (offset < 0) ctx.fail(fmt::format("position_offset {} must be >= 0", offset));
  const std::int64_t rotary_dim = ctx.get_int("rotary_dim", 0);
  const auto d = ctx.value(x.shape[3]);
  if (rotary_dim < 0) ctx.fail(fmt::format("rotary_dim {} must be >= 0 (0 means the whole head dim)", rotary_dim));
  if (rotary_dim == 0) {
    if (d && *d % 2 != 0) {
      ctx.fail(
          fmt::format("the head dim of '{}' (shape {}) is {}, which is odd; give an even rotary_dim < {} so the rest "
                      "passes through",
                      x.name, ctx.shape_string(x.shape), *d, *d));
    }
  } else {
    if (rotary_dim % 2 != 0) ctx.fail(fmt::format("rotary_dim {} must be even (dims rotate in pairs)", rotary_dim));
    if (d && rotary_dim > *d) {
      ctx.fail(fmt::format("rotary_dim {} is larger than the head dim {} of '{}' (shape {})", rotary_dim, *d, x.name,
                           ctx.shape_string(x.shape)));
    }
  }
  return {OutputType{x.dtype, x.shape}};
}

}  // namespace

void register_transformer_ops(std::vector<OpDef>& ops) {
  ops.push_back(OpDef{"attention",
                      3,
                      4,
                      {"causal", "scale", "layout", "heads", "kv_heads"},
                      infer_attention,
                      "scaled dot-product attention with grouped kv heads, optional mask and causal masking; q, k, v "
                      "and the output [B, H, S, D] (layout bhsd), [B, S, H, D] (bshd) or read from one packed "
                      "[B, S, (heads + 2 kv_heads) D] tensor (packed; output [B, S, H, D])"});
  ops.push_back(OpDef{"rotary_embedding",
                      1,
                      1,
                      {"base", "rotary_dim", "interleaved", "position_offset"},
                      infer_rotary,
                      "rotary position embedding over [B, H, S, D] (halves or interleaved pairs)"});
}

}  // namespace tensoracle::graph
