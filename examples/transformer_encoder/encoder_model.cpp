// The example encoder: reproducible safetensors weights and the network built with the layer API.
#include "encoder_model.hpp"

#include <fmt/format.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace encoder_example {

using tensoracle::DataType;
using tensoracle::Network;
using tensoracle::Tensor;

void write_weights(const std::filesystem::path& path, const EncoderConfig& c) {
  std::mt19937 rng(20261130);
  std::vector<std::vector<float>> storage;
  std::vector<tensoracle::TensorToWrite> tensors;
  auto add = [&](const std::string& name, tensoracle::Dims shape, float scale, float offset = 0.0f) {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    auto& v = storage.emplace_back(static_cast<std::size_t>(shape.volume()));
    for (auto& x : v) x = offset + scale * dist(rng);
    tensors.push_back({name, DataType::kF32, shape, nullptr});
  };
  const float w_scale = 1.0f / std::sqrt(static_cast<float>(c.hidden));
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const std::string p = fmt::format("layers.{}.", l);
    for (const char* name : {"q", "k", "v", "o"}) {
      add(p + "attn." + name + ".weight", {c.hidden, c.hidden}, w_scale);
      add(p + "attn." + name + ".bias", {c.hidden}, 0.02f);
    }
    add(p + "ln1.weight", {c.hidden}, 0.05f, 1.0f);
    add(p + "ln1.bias", {c.hidden}, 0.02f);
    add(p + "ffn.up.weight", {c.ffn, c.hidden}, w_scale);
    add(p + "ffn.up.bias", {c.ffn}, 0.02f);
    add(p + "ffn.down.weight", {c.hidden, c.ffn}, 1.0f / std::sqrt(static_cast<float>(c.ffn)));
    add(p + "ffn.down.bias", {c.hidden}, 0.02f);
    add(p + "ln2.weight", {c.hidden}, 0.05f, 1.0f);
    add(p + "ln2.bias", {c.hidden}, 0.02f);
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) tensors[i].data = storage[i].data();
  tensoracle::write_safetensors(path, tensors,
                                std::map<std::string, std::string>{{"model", "tensoracle example encoder"}});
}

Network define_network(const tensoracle::WeightStore& weights, const EncoderConfig& c) {
  Network net;
  auto w = [&](const std::string& name) { return net.add_constant(weights.get(name)); };
  const std::int64_t head_dim = c.hidden / c.heads;
  Tensor x = net.add_input("x", DataType::kF32, {-1, -1, c.hidden});
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const std::string p = fmt::format("layers.{}.", l);
    // [B, S, hidden] → [B, heads, S, head_dim]
    auto heads = [&](const char* name) {
      Tensor t = net.add_linear(x, w(p + "attn." + name + ".weight"), w(p + "attn." + name + ".bias"));
      t = net.add_reshape(t, {0, 0, c.heads, head_dim});
      return net.add_transpose(t, {0, 2, 1, 3});
    };
    Tensor attn = net.add_attention(heads("q"), heads("k"), heads("v"));
    attn = net.add_reshape(net.add_transpose(attn, {0, 2, 1, 3}), {0, 0, c.hidden});
    attn = net.add_linear(attn, w(p + "attn.o.weight"), w(p + "attn.o.bias"));
    x = net.add_layer_norm(net.add_binary("add", x, attn), w(p + "ln1.weight"), w(p + "ln1.bias"), 1e-12);
    Tensor h = net.add_activation("gelu", net.add_linear(x, w(p + "ffn.up.weight"), w(p + "ffn.up.bias")));
    h = net.add_linear(h, w(p + "ffn.down.weight"), w(p + "ffn.down.bias"));
    x = net.add_layer_norm(net.add_binary("add", x, h), w(p + "ln2.weight"), w(p + "ln2.bias"), 1e-12);
  }
  net.mark_output(x, "y");
  return net;
}

}  // namespace encoder_example
