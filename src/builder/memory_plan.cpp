// Activation memory planning: greedy best-offset placement of tensors sorted by size, respecting lifetimes.
#include "builder/memory_plan.hpp"

#include <algorithm>
#include <numeric>

namespace tensoracle::builder {

namespace {

std::size_t align_up(std::size_t n) { return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

}  // namespace

MemoryPlan plan_memory(const graph::Graph& g, const std::vector<std::vector<Dims>>& shapes, bool alias_reshapes) {
  const std::size_t n = g.tensors.size();
  MemoryPlan plan;
  plan.offset.assign(n, -1);
  plan.bytes.assign(n, 0);
  std::vector<bool> is_output(n, false);
  for (auto id : g.outputs) is_output[static_cast<std::size_t>(id)] = true;
  std::vector<std::int64_t> first(n, -1), last(n, -1);
  for (std::size_t l = 0; l < g.layers.size(); ++l) {
    for (auto id : g.layers[l].outputs) {
      first[static_cast<std::size_t>(id)] = static_cast<std::int64_t>(l);
      last[static_cast<std::size_t>(id)] = static_cast<std::int64_t>(l);
    }
    for (auto id : g.layers[l].inputs) {
      if (id >= 0) last[static_cast<std::size_t>(id)] = static_cast<std::int64_t>(l);
    }
  }
  auto in_arena = [&](std::int32_t id) {
    return id >= 0 && g.tensor(id).kind == graph::TensorKind::kLayerOutput && !is_output[static_cast<std::size_t>(id)];
  };
  // Aliases: the output of a reshape / squeeze / unsqueeze of an arena tensor is the same bytes (tensors are never
  // written after the step that makes them), so both get one place that lives as long as either.
  std::vector<std::size_t> root(n);
  std::iota(root.begin(), root.end(), std::size_t{0});
  if (alias_reshapes) {
    for (const auto& layer : g.layers) {
      if ((layer.op != "reshape" && layer.op != "squeeze" && layer.op != "unsqueeze") || !in_arena(layer.inputs[0]) ||
          !in_arena(layer.outputs[0])) {
        continue;
      }
      const auto out = static_cast<std::size_t>(layer.outputs[0]);
      root[out] = root[static_cast<std::size_t>(layer.inputs[0])];  // inputs come first: already resolved
      first[root[out]] = std::min(first[root[out]], first[out]);
      last[root[out]] = std::max(last[root[out]], last[out]);
    }
  }
  std::vector<std::size_t> planned;
  for (std::size_t id = 0; id < n; ++id) {
    if (!in_arena(static_cast<std::int32_t>(id))) continue;
    std::size_t size = 0;
    for (const auto& point : shapes) {
      size = std::max(size, static_cast<std::size_t>(point[id].volume()) * element_size(g.tensors[id].dtype));
    }
    plan.bytes[id] = size;
    if (root[id] == id) planned.push_back(id);
  }
  for (std::size_t id = 0; id < n; ++id) {  // a place as large as the largest of its aliases
    if (root[id] != id) plan.bytes[root[id]] = std::max(plan.bytes[root[id]], plan.bytes[id]);
  }
  // Largest first, then earliest: a classic greedy that keeps the arena close to the peak of live bytes.
  std::sort(planned.begin(), planned.end(), [&](std::size_t a, std::size_t b) {
    if (plan.bytes[a] != plan.bytes[b]) return plan.bytes[a] > plan.bytes[b];
    return a < b;
  });
  struct Placed {
    std::size_t begin, end;
    std::int64_t first, last;
  };
  std::vector<Placed> placed;
  for (std::size_t id : planned) {
    const std::size_t size = align_up(std::max<std::size_t>(plan.bytes[id], 1));
    std::vector<std::pair<std::size_t, std::size_t>> busy;
    for (const auto& p : placed) {
      if (p.first <= last[id] && first[id] <= p.last) busy.emplace_back(p.begin, p.end);
    }
    std::sort(busy.begin(), busy.end());
    std::size_t offset = 0;
    for (const auto& [b, e] : busy) {
      if (offset + size <= b) break;
      offset = std::max(offset, e);
    }
    placed.push_back(Placed{offset, offset + size, first[id], last[id]});
    plan.offset[id] = static_cast<std::int64_t>(offset);
    plan.arena_bytes = std::max(plan.arena_bytes, offset + size);
  }
  for (std::size_t id = 0; id < n; ++id) {
    if (root[id] != id) plan.offset[id] = plan.offset[root[id]];
  }
  return plan;
}

}  // namespace tensoracle::builder
