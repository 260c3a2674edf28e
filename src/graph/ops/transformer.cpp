// Op definitions (inputs, attributes, dtype and shape inference) of the transformer family.
#include <fmt/format.h>

#include <cmath>

#include "graph/op_def.hpp"

namespace tensoracle::graph {
namespace {

// ---- attention ----

std::vector<OutputType> infer_attention(InferContext& ctx) {
  const TensorType& q = ctx.input(0, "q");
  const TensorType& k = ctx.input(1, "k");
  const TensorType& v = ctx.input(2, "v");
  ctx.require_dtype(q, kFloatTypes, "q");
  ctx.require_same_dtype(q, k);
  ctx.require_same_dtype(q, v);
  ctx.require_rank(q, 4, "q [B, Hq, Sq, D]");
  ctx.require_rank(k, 4, "k [B, Hkv, Skv, D]");
  ctx.require_rank(v, 4, "v [B, Hkv, Skv, Dv]");
  (void)ctx.get_bool("causal", false);
  if (ctx.has("scale")) {
    const double scale = ctx.get_float("scale");
    if (!std::isfinite(scale)) ctx.fail(fmt::format("scale {} must be finite", scale));
  }
  auto shapes = [&] {
    return fmt::format("q '{}' {}, k '{}' {}, v '{}' {}", q.name, ctx.shape_string(q.shape), k.name,
                       ctx.shape_string(k.shape), v.name, ctx.shape_string(v.shape));
  };
  ctx.require_equal(q.shape[0], k.shape[0], fmt::format("the batch sizes of q and k differ ({})", shapes()));
  ctx.require_equal(q.shape[0], v.shape[0], fmt::format("the batch sizes of q and v differ ({})", shapes()));
  ctx.require_equal(k.shape[1], v.shape[1], fmt::format("the head counts of k and v differ ({})", shapes()));
  ctx.require_equal(k.shape[2], v.shape[2], fmt::format("the sequence lengths of k and v differ ({})", shapes()));
  ctx.require_equal(q.shape[3], k.shape[3], fmt::format("the head dims of q and k differ ({})", shapes()));
  const auto hq = ctx.value(q.shape[1]), hkv = ctx.value(k.shape[1]);
  if (hkv && *hkv == 0 && (!hq || *hq != 0)) ctx.fail(fmt::format("k has 0 heads ({})", shapes()));
  if (hq && hkv && *hkv != 0 && *hq % *hkv != 0) {
    ctx.fail(fmt::format("q's {} heads are not a multiple of k's {} heads ({})", *hq, *hkv, shapes()));
  }

  // Dims that may be symbolic: prefer a constant where one of the equal pair is known.
  auto pick = [&](DimId a, DimId b) { return ctx.value(a) ? a : b; };
  const DimId batch = pick(pick(q.shape[0], k.shape[0]), v.shape[0]);
  const DimId skv = pick(k.shape[2], v.shape[2]);
  const std::vector<DimId> scores{batch, q.shape[1], q.shape[2], skv};

  if (ctx.has_input(3)) {
    const TensorType& mask = ctx.input(3, "mask");
    if (mask.dtype != DataType::kBool && mask.dtype != q.dtype) {
      ctx.fail(fmt::format("mask '{}' has dtype {}; it must be bool (true = attend) or additive {} like q", mask.name,
                           to_string(mask.dtype), to_string(q.dtype)));
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
  return {OutputType{q.dtype, {batch, q.shape[1], q.shape[2], v.shape[3]}}};
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
                      {"causal", "scale"},
                      infer_attention,
                      "scaled dot-product attention with grouped kv heads, optional mask and causal masking"});
  ops.push_back(OpDef{"rotary_embedding",
                      1,
                      1,
                      {"base", "rotary_dim", "interleaved", "position_offset"},
                      infer_rotary,
                      "rotary position embedding over [B, H, S, D] (halves or interleaved pairs)"});
}

}  // namespace tensoracle::graph
