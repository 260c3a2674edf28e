// The CUDA target's graph passes that rewrite products, convolutions and layouts, in the order the builder runs them.
#include "builder/passes/passes.hpp"

namespace tensoracle::builder {

Network device_layout_passes(const Network& network, WeightPool& pool) {
  Network net = patch_convolutions(network, pool);
  net = fuse_matmul_bias(net, pool);
  // After fuse_matmul_bias (whose linears it takes too), before fuse_epilogues (it takes plain products only).
  net = fuse_qkv_projections(net, pool);
  net = fuse_epilogues(net);
  net = fuse_quantized_outputs(net);  // after fuse_epilogues: the quantize follows the activation
  net = to_channels_last(net, pool);
  return remove_dead_layers(fuse_attention_layout(net));
}

}  // namespace tensoracle::builder
