// The CPU reference executor: runs any valid Network on host tensors with plain, readable kernels.
#pragma once

#include <map>
#include <string>

#include "tensoracle/host_tensor.hpp"
#include "tensoracle/network.hpp"

namespace tensoracle {

// Runs `network` on the CPU for the given inputs (every input, by name, with a shape that fits the
// declared one and the declared dtype) and returns every marked output by name. Floating-point
// layers compute in double (f64 tensors) or at least f32 precision with f32 accumulation, and round
// to the dtype of each output tensor, so f16/bf16 tensors are rounded wherever the graph holds
// them. This is the oracle every other backend is checked against.
//
// Throws GraphError for an invalid network or inputs (naming the input or layer), and
// InvalidArgumentError for a missing input or a dtype mismatch.
std::map<std::string, HostTensor> run_reference(const Network& network,
                                                const std::map<std::string, HostTensor>& inputs);

}  // namespace tensoracle
