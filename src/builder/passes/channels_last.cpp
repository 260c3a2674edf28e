// Builder pass for the CUDA target: f16/bf16 2D convolutions and quantized convolutions (and the pooling and quantizes
// that read them) run channels last; an image's stride-2 stem (float, or i8) runs as a stride-1 convolution of its
// space-to-depth form.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "builder/graph_rewriter.hpp"
#include "builder/passes/constant_data.hpp"
#include "builder/passes/conv_attrs.hpp"
#include "builder/passes/passes.hpp"
#include "builder/passes/tensor_uses.hpp"
#include "graph/graph.hpp"
#include "graph/op_def.hpp"

namespace tensoracle::builder {

namespace {

std::string layout_of(const graph::Layer& layer) {
  return graph::AttrReader(layer.attrs, layer.name, layer.op).get_string("layout", "nchw");
}

// A convolution that runs channels last: 2D, f16/bf16 (conv) or i8/f8e4m3 (quantized_conv), constant weight, channels
// first now.
bool converts(const graph::Graph& g, const graph::Layer& layer) {
  if ((layer.op != "conv" && layer.op != "quantized_conv") || layout_of(layer) != "nchw" ||
      g.tensor(layer.inputs[0]).shape.size() != 4 || !is_constant(g, layer.inputs[1])) {
    return false;
  }
  const DataType t = g.tensor(layer.inputs[0]).dtype;
  if (layer.op == "quantized_conv") return t == DataType::kI8 || t == DataType::kF8E4M3;
  return t == DataType::kF16 || t == DataType::kBF16;
}

// The residual's input of a converted convolution.
std::size_t residual_input(const graph::Layer& conv) { return conv.op == "quantized_conv" ? 4 : 3; }

// A quantize with one scale (elementwise, so any layout) of a 4D tensor.
bool quantizes_4d_per_tensor(const graph::Graph& g, const graph::Layer& layer) {
  return layer.op == "quantize" && g.tensor(layer.inputs[0]).shape.size() == 4 &&
         g.tensor(layer.inputs[1]).shape.empty();
}

// Whether a reader at `position` of `layer` takes the channels-last form of a converted tensor.
bool takes_channels_last(const graph::Graph& g, const graph::Layer& layer, std::size_t position) {
  if (converts(g, layer)) return position == 0 || position == residual_input(layer);
  if (position != 0) return false;
  if (quantizes_4d_per_tensor(g, layer)) return true;
  if (layout_of(layer) != "nchw") return false;
  return layer.op == "max_pool2d" || (layer.op == "global_avg_pool" && g.tensor(layer.inputs[0]).shape.size() == 4);
}

const std::vector<std::int64_t> kToLast = {0, 2, 3, 1};
const std::vector<std::int64_t> kToFirst = {0, 3, 1, 2};

// cuDNN's tensor-core convolutions read channels last in 16-byte groups (8 f16/bf16 channels, 16 i8/f8e4m3): a
// convolution with fewer or an odd number of input channels (an image's 3, in a CNN's stem or a ViT's patch
// projection) falls to kernels many times slower, or to none. Such a convolution (groups 1) reads its input with zero
// channels appended up to a multiple of 16 bytes, and its weight gets zero channels to match: the sums are unchanged.
constexpr std::int64_t kChannelBytes = 16;

// `channels` rounded up to a multiple of 16 bytes of `dtype`.
std::int64_t round_up_channels(std::int64_t channels, DataType dtype) {
  const auto multiple = kChannelBytes / static_cast<std::int64_t>(element_size(dtype));
  return (channels + multiple - 1) / multiple * multiple;
}

std::int64_t padded_channels(const graph::Graph& g, const graph::Layer& conv) {
  const std::int64_t groups = graph::AttrReader(conv.attrs, conv.name, conv.op).get_int("groups", 1);
  const Dims x = g.static_dims(conv.inputs[0]);
  if (groups != 1 || x.rank() != 4 || x[1] <= 0) return 0;
  const std::int64_t padded = round_up_channels(x[1], g.tensor(conv.inputs[0]).dtype);
  return padded == x[1] ? 0 : padded;
}

// A channels-last weight [O, kh, kw, C] with zero channels appended up to `channels`.
HostTensor pad_last_axis(const HostTensor& w, std::int64_t channels) {
  const std::int64_t c = w.shape[3];
  const std::size_t element = element_size(w.dtype);
  HostTensor out;
  out.dtype = w.dtype;
  out.shape = Dims{w.shape[0], w.shape[1], w.shape[2], channels};
  out.bytes.assign(static_cast<std::size_t>(out.shape.volume()) * element, std::byte{0});
  const std::int64_t rows = w.shape[0] * w.shape[1] * w.shape[2];
  for (std::int64_t r = 0; r < rows; ++r) {
    std::copy_n(w.bytes.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r * c) * element),
                static_cast<std::size_t>(c) * element,
                out.bytes.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r * channels) * element));
  }
  return out;
}

// A stride-2 convolution of an image (a CNN's stem: ResNet's 7x7 on 3 channels) as a stride-1 convolution of its 2x2
// space-to-depth input: x padded as the convolution pads it (and at the end to whole 2x2 cells), cell (i, j) of
// channel c becoming channel (2a + b)·C + c of position (i, j) for its element (a, b), and the weight's taps regrouped
// the same way (zero where the kernel has no tap). The sums are unchanged; the cuDNN convolution reads 4x as many
// channels over a quarter of the positions, which the tensor cores take far better (ResNet-50's stem at batch 256 on
// the H200: 1233 µs as 7x7/2 over 8 padded channels, 679 µs as 4x4/1 over 16, bench/quantized_conv_probe.cpp).
struct SpaceToDepth {
  std::int64_t c = 0;                           // the input's channels
  std::int64_t ph = 0, pw = 0, eh = 0, ew = 0;  // padding at the start and at the end
  std::int64_t kh = 0, kw = 0;                  // the regrouped kernel
  std::int64_t channels = 0;                    // 4·C, padded to 16 bytes
};

// The space-to-depth form of a converted conv (f16/bf16, or a quantized_conv: an i8 stem that
// lower_quantized_products let through), when it has one: groups 1, stride 2 and dilation 1 on both axes, static
// input channels and extent, channels that need padding, and fewer padded terms per output than now.
std::optional<SpaceToDepth> space_to_depth_form(const graph::Graph& g, const graph::Layer& conv) {
  const std::int64_t padded = padded_channels(g, conv);
  if (padded == 0) return std::nullopt;
  const Conv2dAttrs attrs = conv2d_attrs(conv);
  if (!attrs.stride2_undilated()) return std::nullopt;
  const std::vector<std::int64_t>& padding = attrs.padding;
  const Dims x = g.static_dims(conv.inputs[0]);
  const Dims weight = g.static_dims(conv.inputs[1]);
  SpaceToDepth s;
  const std::int64_t h = x[2], w = x[3];
  s.c = x[1], s.ph = padding.at(0), s.pw = padding.at(1);
  if (s.c <= 0 || h <= 0 || w <= 0 || weight[2] < 2 || weight[3] < 2) return std::nullopt;
  const std::int64_t oh = (h + 2 * s.ph - weight[2]) / 2 + 1, ow = (w + 2 * s.pw - weight[3]) / 2 + 1;
  s.kh = (weight[2] + 1) / 2, s.kw = (weight[3] + 1) / 2;
  // The space-to-depth input's extent (oh + kh - 1 cells) fixes the padding at the end.
  s.eh = 2 * (oh + s.kh - 1) - h - s.ph, s.ew = 2 * (ow + s.kw - 1) - w - s.pw;
  if (oh <= 0 || ow <= 0 || s.eh < 0 || s.ew < 0) return std::nullopt;
  s.channels = round_up_channels(4 * s.c, g.tensor(conv.inputs[0]).dtype);
  if (s.kh * s.kw * s.channels >= weight[2] * weight[3] * padded) return std::nullopt;
  return s;
}

// The weight [O, C, kh, kw] of a stride-2 convolution regrouped for its space-to-depth input in `block` x `block`
// cells (C channels each), channels last: [R·O, kh', kw', channels] for R = per_side² results a cell (1: the 2x2
// form; 4: the blocked form, result (dy, dx) at channels (dy·2 + dx)·O). Result channel d·O + o and input channel
// (by·block + bx)·C + c at tap (ky, kx) hold the weight's tap (block·ky + by − 2·dy, block·kx + bx − 2·dx), zero
// where it has none.
HostTensor regroup_stem_weight(const HostTensor& w, std::int64_t c_in, std::int64_t block, std::int64_t per_side,
                               std::int64_t kh2, std::int64_t kw2, std::int64_t channels) {
  const std::int64_t o = w.shape[0], kh = w.shape[2], kw = w.shape[3], results = per_side * per_side;
  const std::size_t element = element_size(w.dtype);
  HostTensor out;
  out.dtype = w.dtype;
  out.shape = Dims{results * o, kh2, kw2, channels};
  out.bytes.assign(static_cast<std::size_t>(out.shape.volume()) * element, std::byte{0});
  for (std::int64_t d = 0; d < results; ++d) {
    const std::int64_t dy = d / per_side, dx = d % per_side;
    for (std::int64_t f = 0; f < o; ++f) {
      for (std::int64_t c = 0; c < c_in; ++c) {
        for (std::int64_t r = 0; r < kh; ++r) {
          for (std::int64_t q = 0; q < kw; ++q) {
            const std::int64_t ry = r + 2 * dy, qx = q + 2 * dx;  // block·ky + by, block·kx + bx
            const std::int64_t from = ((f * c_in + c) * kh + r) * kw + q;
            const std::int64_t to = (((d * o + f) * kh2 + ry / block) * kw2 + qx / block) * channels +
                                    (ry % block * block + qx % block) * c_in + c;
            std::copy_n(w.bytes.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(from) * element),
                        element,
                        out.bytes.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(to) * element));
          }
        }
      }
    }
  }
  return out;
}

// A stem whose only reader is a max pool (ResNet's 7x7 stride-2 convolution on 3 channels, then its 3x3 stride-2 max
// pool), wider still: the convolution reads the 4x4 space-to-depth input (16·C channels, zero channels to a multiple
// of 64) and makes each 2x2 cell of its results, as 4·O channels ((dy·2 + dx)·O + o); the max pool reads them in
// that form (input_block_size 2). With x padded by the convolution's own padding p at the start, output row
// 2·Y + dy reads padded rows 4·Y + 2·dy + r for its kernel row r, which is row 4·ky + by of cell Y + ky: tap ky of
// the cells' convolution, element by of a cell. At batch 256 on the H200 cuDNN runs ResNet-50's stem in 325 µs in this
// form (a 3x3 convolution, 64 -> 256 channels, 58x58 cells) against 676 µs in the 2x2 form
// (bench/quantized_conv_probe.cpp).
struct BlockedStem {
  std::int64_t c = 0, o = 0;                    // the convolution's input and output channels
  std::int64_t ph = 0, pw = 0, eh = 0, ew = 0;  // padding at the start and at the end
  std::int64_t kh = 0, kw = 0;                  // the cells' kernel
  std::int64_t channels = 0;                    // 16·C, padded to a multiple of 64
};

constexpr std::int64_t kBlockedChannels = 64;

// A converted conv's bias input (quantized_conv's comes after its per-channel scale), the residual the next one.
std::size_t bias_input(const graph::Layer& conv) { return residual_input(conv) - 1; }

// The blocked form of a converted conv (f16/bf16, or an i8 quantized_conv), when it has one: the space-to-depth
// form's conditions, a constant bias or none (and quantized_conv's constant scales), no residual, even output extents,
// one reader (a max_pool2d that converts), and no more than 2.5x the padded multiply-adds of the 2x2 form (a 7x7 or
// 5x5 kernel; a 3x3 one would do 4x as many).
std::optional<BlockedStem> blocked_stem_form(const graph::Graph& g, const graph::Layer& conv, const TensorUses& uses,
                                             const std::optional<SpaceToDepth>& s2d) {
  const TensorUse* use = uses.only_reader(conv.outputs[0]);
  if (!s2d || use == nullptr || use->position != 0) return std::nullopt;
  const graph::Layer& reader = g.layers[use->layer];
  if (reader.op != "max_pool2d" || layout_of(reader) != "nchw") return std::nullopt;
  const std::size_t bias = bias_input(conv);
  if (conv.inputs.size() > bias + 1 && conv.inputs[bias + 1] >= 0) return std::nullopt;
  if (conv.inputs.size() > bias && conv.inputs[bias] >= 0 && !is_constant(g, conv.inputs[bias])) return std::nullopt;
  if (conv.op == "quantized_conv" && !is_constant(g, conv.inputs[2])) return std::nullopt;
  const Dims x = g.static_dims(conv.inputs[0]), weight = g.static_dims(conv.inputs[1]),
             y = g.static_dims(conv.outputs[0]);
  if (y.rank() != 4 || y[2] <= 0 || y[3] <= 0 || y[2] % 2 != 0 || y[3] % 2 != 0) return std::nullopt;
  BlockedStem b;
  b.c = s2d->c, b.o = weight[0], b.ph = s2d->ph, b.pw = s2d->pw;
  b.kh = (weight[2] + 1) / 4 + 1, b.kw = (weight[3] + 1) / 4 + 1;
  b.eh = 4 * (y[2] / 2 + b.kh - 1) - x[2] - b.ph, b.ew = 4 * (y[3] / 2 + b.kw - 1) - x[3] - b.pw;
  b.channels = (16 * b.c + kBlockedChannels - 1) / kBlockedChannels * kBlockedChannels;
  if (b.eh < 0 || b.ew < 0) return std::nullopt;
  if (2 * b.kh * b.kw * b.channels > 5 * s2d->kh * s2d->kw * s2d->channels) return std::nullopt;
  return b;
}

// A bias [O] repeated for the 4 results of a cell: [4·O].
HostTensor repeat_bias(const HostTensor& bias, std::int64_t times) {
  HostTensor out;
  out.dtype = bias.dtype;
  out.shape = Dims{bias.shape.volume() * times};
  for (std::int64_t i = 0; i < times; ++i) out.bytes.insert(out.bytes.end(), bias.bytes.begin(), bias.bytes.end());
  return out;
}

}  // namespace

Network to_channels_last(const Network& network, WeightPool& pool) {
  const graph::Graph& g = graph::graph_of(network);
  // Tensors read channels first somewhere (or network outputs): their channels-first form must exist.
  std::vector<bool> needs_first(g.tensors.size(), false);
  for (auto id : g.outputs) needs_first[static_cast<std::size_t>(id)] = true;
  bool any = false;
  for (const auto& layer : g.layers) {
    any = any || converts(g, layer);
    for (std::size_t p = 0; p < layer.inputs.size(); ++p) {
      if (layer.inputs[p] >= 0 && !takes_channels_last(g, layer, p)) {
        needs_first[static_cast<std::size_t>(layer.inputs[p])] = true;
      }
    }
  }
  if (!any) return remove_dead_layers(network);
  const TensorUses uses(g);

  GraphRewriter rewriter(g);
  Network& net = rewriter.network();
  std::map<std::int32_t, Tensor> last;    // source tensor -> its channels-last form
  std::map<std::int32_t, Tensor> padded;  // source tensor -> its channels-last form with zero channels appended
  std::map<std::int32_t, Tensor> blocks;  // a blocked stem's result -> its form in 2x2 cells (BlockedStem)
  auto channels_last = [&](std::int32_t id) {
    auto it = last.find(id);
    if (it != last.end()) return it->second;
    Attributes attrs{{"perm", kToLast}};
    const std::string name = g.tensor(id).name + ".nhwc";
    Tensor t = net.add_layer("transpose", {rewriter.get(id)}, attrs, name)[0];
    net.rename_tensor(t, name);
    return last[id] = t;
  };
  // Makes `layer` channels last on `inputs` (with attribute layout "nhwc" unless it is elementwise); its output keeps
  // a channels-first twin where something needs it.
  auto emit = [&](const graph::Layer& layer, const std::vector<Tensor>& inputs, bool has_layout = true) {
    Attributes attrs = layer.attrs;
    if (has_layout) attrs["layout"] = std::string("nhwc");
    const auto out = layer.outputs[0];
    const std::string name = g.tensor(out).name + ".nhwc";
    Tensor y = net.add_layer(layer.op, inputs, attrs, layer.name)[0];
    net.rename_tensor(y, name);
    last[out] = y;
    if (needs_first[static_cast<std::size_t>(out)]) {
      Tensor first = net.add_layer("transpose", {y}, Attributes{{"perm", kToFirst}}, layer.name + ".to_nchw")[0];
      net.rename_tensor(first, g.tensor(out).name);
      rewriter.set(out, first);
    }
  };

  // The space-to-depth input of a stem: one space_to_depth step (padding, 2x2 cells into channels, channels last,
  // zero channels to 16 bytes) instead of a pad, a transpose and a second pad. A quantized stem's x, when a quantize
  // by one constant scale makes it for this convolution alone (an image quantized), is quantized by that step too
  // (`quantize_to`), reading the float image; the quantize step is then left unread.
  auto space_to_depth = [&](const graph::Layer& conv, std::int64_t block, const std::vector<std::int64_t>& pads,
                            std::int64_t channels) {
    const std::string name = conv.name + "/input_space_to_depth";
    Attributes attrs{
        {"block_size", block}, {"pads", pads}, {"output_layout", std::string("nhwc")}, {"channels", channels}};
    std::vector<Tensor> inputs = {rewriter.get(conv.inputs[0])};
    const graph::Layer* quantize = producer_of(g, conv.inputs[0], "quantize");
    if (conv.op == "quantized_conv" && quantize != nullptr && quantizes_per_tensor(g, *quantize) &&
        uses.only_reader(conv.inputs[0]) != nullptr) {
      attrs["quantize_to"] = std::string(to_string(g.tensor(conv.inputs[0]).dtype));
      inputs = {rewriter.get(quantize->inputs[0]), rewriter.get(quantize->inputs[1])};
    }
    Tensor t = net.add_layer("space_to_depth", inputs, attrs, name)[0];
    net.rename_tensor(t, name);
    return t;
  };

  auto one_to_one = [](graph::Layer& conv) {
    conv.attrs["stride"] = std::vector<std::int64_t>{1, 1};
    conv.attrs["padding"] = std::vector<std::int64_t>{0, 0};
    conv.attrs["dilation"] = std::vector<std::int64_t>{1, 1};
    conv.attrs["layout"] = std::string("nhwc");
  };

  for (const auto& layer : g.layers) {
    const std::optional<SpaceToDepth> s2d = converts(g, layer) ? space_to_depth_form(g, layer) : std::nullopt;
    const std::optional<BlockedStem> blocked = blocked_stem_form(g, layer, uses, s2d);
    if (blocked) {
      graph::Layer converted = layer;
      one_to_one(converted);
      const BlockedStem& b = *blocked;
      std::vector<Tensor> inputs = {space_to_depth(layer, 4, {b.ph, b.pw, b.eh, b.ew}, b.channels)};
      const std::string wname = layer.name + "/weight_blocks";
      HostTensor w = regroup_stem_weight(constant_tensor(g, layer.inputs[1]), b.c, 4, 2, b.kh, b.kw, b.channels);
      inputs.push_back(net.add_constant(pool.add(wname, w.dtype, w.shape, std::move(w.bytes)), wname));
      // Per output channel: quantized_conv's scale, and the bias, repeated for the 4 results of a cell.
      for (std::size_t i = 2; i <= bias_input(layer) && i < layer.inputs.size(); ++i) {
        if (layer.inputs[i] < 0) {
          inputs.emplace_back();
          continue;
        }
        const std::string cname = layer.name + (i == bias_input(layer) ? "/bias_blocks" : "/scale_blocks");
        HostTensor c = repeat_bias(constant_tensor(g, layer.inputs[i]), 4);
        inputs.push_back(net.add_constant(pool.add(cname, c.dtype, c.shape, std::move(c.bytes)), cname));
      }
      // quantized_conv's quantized result: its output scale (after the residual, which a blocked stem has none of).
      for (std::size_t i = bias_input(layer) + 2; i < layer.inputs.size(); ++i) {
        if (inputs.size() < i) inputs.resize(i);
        inputs.push_back(layer.inputs[i] < 0 ? Tensor{} : rewriter.get(layer.inputs[i]));
      }
      while (!inputs.empty() && !inputs.back().valid()) inputs.pop_back();
      const std::string name = g.tensor(layer.outputs[0]).name + ".nhwc_blocks";
      Tensor y = net.add_layer(layer.op, inputs, converted.attrs, layer.name)[0];
      net.rename_tensor(y, name);
      blocks[layer.outputs[0]] = y;
    } else if (converts(g, layer)) {
      graph::Layer converted = layer;
      Tensor x;
      HostTensor w;
      std::string wname;
      if (const std::optional<SpaceToDepth>& s = s2d) {
        one_to_one(converted);
        x = space_to_depth(layer, 2, {s->ph, s->pw, s->eh, s->ew}, s->channels);
        w = regroup_stem_weight(constant_tensor(g, layer.inputs[1]), s->c, 2, 1, s->kh, s->kw, s->channels);
        wname = layer.name + "/weight_space_to_depth";
      } else {
        x = channels_last(layer.inputs[0]);
        w = permute(constant_tensor(g, layer.inputs[1]), {0, 2, 3, 1});  // [O, C/g, kh, kw] -> [O, kh, kw, C/g]
        wname = layer.name + "/weight_nhwc";
        if (const std::int64_t channels = padded_channels(g, layer); channels != 0) {
          w = pad_last_axis(w, channels);
          auto it = padded.find(layer.inputs[0]);
          if (it == padded.end()) {
            const std::vector<std::int64_t> pads = {0, 0, 0, 0, 0, 0, 0, channels - g.static_dims(layer.inputs[0])[1]};
            const std::string name = g.tensor(layer.inputs[0]).name + ".nhwc_padded";
            Tensor t = net.add_layer("pad", {x}, Attributes{{"pads", pads}}, name)[0];
            net.rename_tensor(t, name);
            it = padded.emplace(layer.inputs[0], t).first;
          }
          x = it->second;
        }
      }
      std::vector<Tensor> inputs = {x, net.add_constant(pool.add(wname, w.dtype, w.shape, std::move(w.bytes)), wname)};
      for (std::size_t i = 2; i < layer.inputs.size(); ++i) {
        const std::int32_t id = layer.inputs[i];
        inputs.push_back(id < 0 ? Tensor{} : i == residual_input(layer) ? channels_last(id) : rewriter.get(id));
      }
      emit(converted, inputs);
    } else if (quantizes_4d_per_tensor(g, layer) && last.count(layer.inputs[0]) != 0) {
      emit(layer, {last.at(layer.inputs[0]), rewriter.get(layer.inputs[1])}, false);
    } else if (layer.op == "max_pool2d" && blocks.count(layer.inputs[0]) != 0) {
      graph::Layer pooled = layer;
      pooled.attrs["input_block_size"] = std::int64_t{2};
      std::vector<Tensor> inputs = {blocks.at(layer.inputs[0])};
      if (layer.inputs.size() > 1) inputs.push_back(rewriter.get(layer.inputs[1]));  // a quantized result's scale
      emit(pooled, inputs);
    } else if (layer.op == "max_pool2d" && layout_of(layer) == "nchw" && last.count(layer.inputs[0]) != 0) {
      std::vector<Tensor> inputs = {last.at(layer.inputs[0])};
      if (layer.inputs.size() > 1) inputs.push_back(rewriter.get(layer.inputs[1]));  // a quantized result's scale
      emit(layer, inputs);
    } else if (layer.op == "global_avg_pool" && layout_of(layer) == "nchw" && last.count(layer.inputs[0]) != 0 &&
               g.tensor(layer.inputs[0]).shape.size() == 4) {
      // [N, H, W, C] -> [N, C, 1, 1]: the output is the same as channels first.
      Attributes attrs = layer.attrs;
      attrs["layout"] = std::string("nhwc");
      rewriter.add_named_layer(layer, layer.op, {last.at(layer.inputs[0])}, attrs);
    } else {
      rewriter.copy_layer(layer);
    }
  }
  // Channels-first twins nothing reads are dropped.
  return remove_dead_layers(rewriter.finish());
}

}  // namespace tensoracle::builder
