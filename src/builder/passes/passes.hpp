// The builder's graph passes; each takes a verified network and returns an equivalent, verified one.
#pragma once

#include <cstddef>

#include "builder/weight_pool.hpp"
#include "tensoracle/network.hpp"

namespace tensoracle::builder {

// Drops layers whose outputs no network output depends on, and constants nothing uses.
Network remove_dead_layers(const Network& network);  // passes/remove_dead_layers.cpp

// Folds a batch_norm that reads a convolution's output (nothing else reads it) into the
// convolution's weight and bias, when all their parameters are constants.
Network fold_batch_norm(const Network& network, WeightPool& pool);  // passes/fold_batch_norm.cpp

// Evaluates layers whose inputs are all constants on the CPU at build time and replaces them by
// constants (their results), unless a result is a network output or larger than max_bytes.
Network fold_constants(const Network& network, WeightPool& pool, std::size_t max_bytes);  // passes/fold_constants.cpp

// Lowers every f32 tensor to `low` (f16 or bf16): f32 weights are converted, f32 inputs are cast
// on entry and f32 outputs cast back on exit; casts and dequantizes to f32 produce `low` instead.
Network lower_precision(const Network& network, DataType low, WeightPool& pool);  // passes/lower_precision.cpp

// CUDA targets: replaces each group of connected elementwise layers (arithmetic, comparisons, where, math,
// activations, not, cast) that the kernel generator handles by one fused_elementwise layer. A layer joins the group
// of its readers when all of them are in that group and its output is not a network output; the group's inputs may
// broadcast to its output. A single such layer becomes a group of one. Groups keep at most 16 inputs.
Network fuse_elementwise(const Network& network);  // passes/fuse_elementwise.cpp

}  // namespace tensoracle::builder
