// A small transformer encoder defined as a tensoracle model package would: weights writer and network definition.
#pragma once

#include <cstdint>
#include <filesystem>

#include <tensoracle/tensoracle.hpp>

namespace encoder_example {

struct EncoderConfig {
  std::int64_t layers = 2;
  std::int64_t hidden = 256;
  std::int64_t heads = 4;
  std::int64_t ffn = 1024;
};

// Writes reproducible weights (a fixed-seed generator, the same bytes on every machine).
void write_weights(const std::filesystem::path& path, const EncoderConfig& config);

// x [batch, seq, hidden] (f32, batch and seq dynamic) → y [batch, seq, hidden]: post-LN BERT-style layers
// (self-attention with a fused attention layer, GELU feed-forward).
tensoracle::Network define_network(const tensoracle::WeightStore& weights, const EncoderConfig& config);

}  // namespace encoder_example
