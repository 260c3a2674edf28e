// Activation memory planning: offsets in one arena for every intermediate tensor, reused by liveness.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "graph/graph.hpp"

namespace tensoracle::builder {

inline constexpr std::size_t kArenaAlignment = 256;

struct MemoryPlan {
  std::size_t arena_bytes = 0;
  std::vector<std::int64_t> offset;  // per tensor id; -1 when the tensor is not in the arena
  std::vector<std::size_t> bytes;    // per tensor id; size reserved (largest over the profile points)
};

// Plans every layer output that is not a network output. `shapes` holds the concrete shapes of
// every tensor at each profile point (min, opt, max); each tensor gets the largest of its sizes.
// Two tensors share bytes only when their lifetimes (producing step to last reading step) do not
// overlap. With alias_reshapes, a reshape / squeeze / unsqueeze of an arena tensor shares its input's bytes (its
// kernel then has nothing to copy).
MemoryPlan plan_memory(const graph::Graph& graph, const std::vector<std::vector<Dims>>& shapes,
                       bool alias_reshapes = false);

}  // namespace tensoracle::builder
