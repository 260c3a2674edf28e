// Builder pass for the CUDA target: f16/bf16 2D convolutions and quantized convolutions (and the pooling and quantizes
// that read them) run channels last; an image's stride-2 stem runs as a stride-1 convolution of its space-to-depth
// form.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "builder/graph_rewriter.hpp"
#include "builder/passes/constant_data.hpp"
#include "builder/passes/passes.hpp"
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

// The space-to-depth form of a converted f16/bf16 conv, when it has one: groups 1, stride 2 and dilation 1 on both
// axes, static input channels and extent, channels that need padding, and fewer padded terms per output than now.
std::optional<SpaceToDepth> space_to_depth_form(const graph::Graph& g, const graph::Layer& conv) {
  const std::int64_t padded = padded_channels(g, conv);
  if (conv.op != "conv" || padded == 0) return std::nullopt;
  const graph::AttrReader attrs(conv.attrs, conv.name, conv.op);
  const auto ints = [&](const char* name, std::int64_t fallback) {
    std::vector<std::int64_t> v = attrs.get_ints(name, std::vector<std::int64_t>{});
    if (v.empty()) v = {fallback, fallback};
    return v;
  };
  const std::vector<std::int64_t> stride = ints("stride", 1), padding = ints("padding", 0),
                                  dilation = ints("dilation", 1);
  if (stride != std::vector<std::int64_t>{2, 2} || dilation != std::vector<std::int64_t>{1, 1}) return std::nullopt;
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

// The weight [O, C, kh, kw] regrouped for the space-to-depth input, channels last: [O, s.kh, s.kw, s.channels].
HostTensor space_to_depth_weight(const HostTensor& w, const SpaceToDepth& s) {
  const std::int64_t o = w.shape[0], kh = w.shape[2], kw = w.shape[3];
  const std::size_t element = element_size(w.dtype);
  HostTensor out;
  out.dtype = w.dtype;
  out.shape = Dims{o, s.kh, s.kw, s.channels};
  out.bytes.assign(static_cast<std::size_t>(out.shape.volume()) * element, std::byte{0});
  for (std::int64_t f = 0; f < o; ++f) {
    for (std::int64_t c = 0; c < s.c; ++c) {
      for (std::int64_t y = 0; y < kh; ++y) {
        for (std::int64_t x = 0; x < kw; ++x) {
          const std::int64_t from = ((f * s.c + c) * kh + y) * kw + x;
          const std::int64_t to = ((f * s.kh + y / 2) * s.kw + x / 2) * s.channels + (y % 2 * 2 + x % 2) * s.c + c;
          std::copy_n(w.bytes.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(from) * element), element,
                      out.bytes.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(to) * element));
        }
      }
    }
  }
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

  GraphRewriter rewriter(g);
  Network& net = rewriter.network();
  std::map<std::int32_t, Tensor> last;    // source tensor -> its channels-last form
  std::map<std::int32_t, Tensor> padded;  // source tensor -> its channels-last form with zero channels appended
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
  // zero channels to 16 bytes) instead of a pad, a transpose and a second pad.
  auto space_to_depth = [&](const graph::Layer& conv, const SpaceToDepth& s) {
    const std::string name = conv.name + "/input_space_to_depth";
    const Attributes attrs{{"block_size", std::int64_t{2}},
                           {"pads", std::vector<std::int64_t>{s.ph, s.pw, s.eh, s.ew}},
                           {"output_layout", std::string("nhwc")},
                           {"channels", s.channels}};
    Tensor t = net.add_layer("space_to_depth", {rewriter.get(conv.inputs[0])}, attrs, name)[0];
    net.rename_tensor(t, name);
    return t;
  };

  for (const auto& layer : g.layers) {
    if (converts(g, layer)) {
      graph::Layer converted = layer;
      Tensor x;
      HostTensor w;
      std::string wname;
      if (const std::optional<SpaceToDepth> s = space_to_depth_form(g, layer)) {
        converted.attrs["stride"] = std::vector<std::int64_t>{1, 1};
        converted.attrs["padding"] = std::vector<std::int64_t>{0, 0};
        converted.attrs["dilation"] = std::vector<std::int64_t>{1, 1};
        x = space_to_depth(layer, *s);
        w = space_to_depth_weight(constant_tensor(g, layer.inputs[1]), *s);
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
