// The builder's graph passes; each takes a verified network and returns an equivalent, verified one.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "builder/weight_pool.hpp"
#include "tensoracle/network.hpp"
#include "tensoracle/plugin.hpp"

namespace tensoracle::builder {

// Drops layers whose outputs no network output depends on, and constants nothing uses.
Network remove_dead_layers(const Network& network);  // passes/remove_dead_layers.cpp

// Folds a batch_norm that reads a convolution's output (nothing else reads it) into the
// convolution's weight and bias, when all their parameters are constants. A weight quantized explicitly (a dequantize
// of a constant, one scale or one per output channel) keeps its quantized values: the batch norm's factor goes into
// its scale, per output channel.
Network fold_batch_norm(const Network& network, WeightPool& pool);  // passes/fold_batch_norm.cpp

// Evaluates layers whose inputs are all constants on the CPU at build time and replaces them by
// constants (their results), unless a result is a network output or larger than max_bytes, or the layer's op is one
// of keep_ops.
Network fold_constants(const Network& network, WeightPool& pool, std::size_t max_bytes,
                       const std::vector<std::string>& keep_ops = {});  // passes/fold_constants.cpp

// Every target: a linear (conv) whose x is a dequantize (one constant scale) of an i8 or f8e4m3 tensor and whose weight
// is a dequantize of a constant of the same type (one constant scale, or one per output feature) becomes
// quantized_linear (quantized_conv): the quantized operands multiplied as they are, the two scales combined into one
// per output feature (f32), bias and epilogue kept. The weight stays quantized in the engine. Dequantizes nothing else
// reads are dropped. A conv with fewer than 16 input channels (a CNN's stem) stays float. A linear whose weight alone
// is such a dequantize, read by no other layer, becomes a weight-only quantized_linear (its float x as it is, the
// weight's scale per output feature).
Network lower_quantized_products(const Network& network, WeightPool& pool);  // passes/quantized_products.cpp

// Lowers every f32 tensor to `low` (f16 or bf16): f32 weights are converted, f32 inputs are cast
// on entry and f32 outputs cast back on exit; casts, dequantizes and quantized_linears to f32 produce `low` instead;
// quantization scales (constants only quantize, dequantize and quantized_linear read as their scale) stay f32. Plugin
// layers get `low` where their plugin supports it on `device`, else keep their dtypes with casts around them.
Network lower_precision(const Network& network, DataType low, WeightPool& pool,
                        plugin::Device device);  // passes/lower_precision.cpp

// CUDA target: matmul(x, b) + row bias (b and the bias constants) becomes linear(x, bᵀ, bias).
Network fuse_matmul_bias(const Network& network, WeightPool& pool);  // passes/fuse_epilogues.cpp

// CUDA target: a 2D convolution whose windows tile its input (kernel = stride > 1x1, no padding or dilation, one group,
// constant weight and bias) becomes reshape -> transpose -> reshape (a row per patch) -> linear -> transpose back to
// channels first: ViT's patch embedding as one GEMM instead of a convolution kernel. When the output is only flattened
// and transposed to [N, Ho·Wo, O] (flatten(2).transpose(1, 2)), the product's rows reshaped are that result instead.
Network patch_convolutions(const Network& network, WeightPool& pool);  // passes/patch_convolutions.cpp

// CUDA target: the q, k and v projections of one attention (plain linear layers, or quantized_linear ones: constant
// weight (and scale), constant bias in all three or none, no residual or activation; each read through a head reshape
// and transpose) that read the same input become one product with the weights (scales, biases) concatenated along N
// in q, k, v order and a split along the
// last axis that gives back their outputs under their names, which fuse_attention_layout then reads "packed" (BERT).
Network fuse_qkv_projections(const Network& network, WeightPool& pool);  // passes/fuse_qkv_projections.cpp

// CUDA target: linear / quantized_linear / 2D conv / quantized_conv (with a bias) followed by a residual add and/or an
// activation (relu; for the linears also gelu, tanh-approximated or erf) becomes one layer with the "activation"
// attribute and the residual as its last input (3; 4 for the quantized ones), as
// cuBLASLt, CUTLASS (erf GELU on sm_90; elsewhere a kernel after cuBLASLt's product) and cuDNN epilogues compute it.
// conv takes a residual only when an activation follows (cuDNN's fused form).
Network fuse_epilogues(const Network& network);  // passes/fuse_epilogues.cpp

// CUDA target: a quantized_linear (quantized_conv) whose result only a quantize with one constant scale reads becomes
// one quantized_linear (quantized_conv) with that quantize in its epilogue (attribute quantize_to, the scale as input
// 5): the product's result stays quantized for the next quantized product, never written in float (a weight-only
// product's result stays float). A layer_norm (rms_norm) read by such a quantize (and possibly by others) gets
// quantize_to, the scale as input 3 (2) and the quantized result as a second output. Run after fuse_epilogues.
Network fuse_quantized_outputs(const Network& network);  // passes/quantized_products.cpp

// CUDA target: f16/bf16 2D convolutions and 2D quantized_convs run channels last (NHWC, where cuDNN's tensor-core
// kernels need no workspace); max_pool2d, global_avg_pool and a quantize with one scale read channels-last inputs
// directly, and transposes are inserted only where channels-first tensors enter or leave. Weights are permuted here,
// once. A convolution (groups 1) whose input channels are not a multiple of 16 bytes (8 f16 channels, 16 i8: an
// image's 3) reads them padded with zero channels (a pad layer) and gets a weight padded to match, so that cuDNN's
// tensor-core kernels take it.
Network to_channels_last(const Network& network, WeightPool& pool);  // passes/channels_last.cpp

// CUDA target: an attention between head transposes ([B, S, H, D] -> [B, H, S, D] on q, k, v and back on its
// output) reads and writes [B, S, H, D] (layout "bshd"); when q, k and v are reshapes of the three outputs of one
// split along the last axis of a [B, S, (Hq + 2 Hkv)·D] tensor, it reads that tensor (layout "packed"). The
// transposes go; the split and reshapes are left for remove_dead_layers.
Network fuse_attention_layout(const Network& network);  // passes/attention_layout.cpp

// CUDA targets: the passes above that rewrite products, convolutions and layouts, in the builder's order
// (patch_convolutions, fuse_matmul_bias, fuse_qkv_projections, fuse_epilogues, fuse_quantized_outputs,
// to_channels_last, fuse_attention_layout,
// remove_dead_layers); fuse_elementwise comes after them when NVRTC can be loaded.
Network device_layout_passes(const Network& network, WeightPool& pool);  // passes/device_layout_passes.cpp

// CUDA targets: replaces each group of connected elementwise layers (arithmetic, comparisons, where, math,
// activations, not, cast) that the kernel generator handles by one fused_elementwise layer. A layer joins the group
// of its readers when all of them are in that group and its output is not a network output; the group's inputs may
// broadcast to its output. A single such layer becomes a group of one. Groups keep at most 16 inputs.
Network fuse_elementwise(const Network& network);  // passes/fuse_elementwise.cpp

}  // namespace tensoracle::builder
