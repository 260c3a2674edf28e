// Builder pass for the CUDA target: f16/bf16 2D convolutions and quantized convolutions (and the pooling and quantizes
// that read them) run channels last.
#include <algorithm>
#include <map>
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

std::int64_t padded_channels(const graph::Graph& g, const graph::Layer& conv) {
  const std::int64_t groups = graph::AttrReader(conv.attrs, conv.name, conv.op).get_int("groups", 1);
  const Dims x = g.static_dims(conv.inputs[0]);
  const auto multiple = kChannelBytes / static_cast<std::int64_t>(element_size(g.tensor(conv.inputs[0]).dtype));
  if (groups != 1 || x.rank() != 4 || x[1] <= 0 || x[1] % multiple == 0) return 0;
  return (x[1] + multiple - 1) / multiple * multiple;
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

  for (const auto& layer : g.layers) {
    if (converts(g, layer)) {
      HostTensor w =
          permute(constant_tensor(g, layer.inputs[1]), {0, 2, 3, 1});  // [O, C/g, kh, kw] -> [O, kh, kw, C/g]
      Tensor x = channels_last(layer.inputs[0]);
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
      const std::string wname = layer.name + "/weight_nhwc";
      std::vector<Tensor> inputs = {x, net.add_constant(pool.add(wname, w.dtype, w.shape, std::move(w.bytes)), wname)};
      for (std::size_t i = 2; i < layer.inputs.size(); ++i) {
        const std::int32_t id = layer.inputs[i];
        inputs.push_back(id < 0 ? Tensor{} : i == residual_input(layer) ? channels_last(id) : rewriter.get(id));
      }
      emit(layer, inputs);
    } else if (quantizes_4d_per_tensor(g, layer) && last.count(layer.inputs[0]) != 0) {
      emit(layer, {last.at(layer.inputs[0]), rewriter.get(layer.inputs[1])}, false);
    } else if (layer.op == "max_pool2d" && layout_of(layer) == "nchw" && last.count(layer.inputs[0]) != 0) {
      emit(layer, {last.at(layer.inputs[0])});
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
