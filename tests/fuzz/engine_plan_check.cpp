// check_engine_plan_input: what fuzz_engine_plan and the regression tests assert of Engine::deserialize.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fuzz_checks.hpp"
#include "tensoracle/engine.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/target_memory.hpp"

namespace tensoracle::fuzz {

void check_engine_plan_input(const std::uint8_t* data, std::size_t size) {
  std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(data),
                               reinterpret_cast<const std::byte*>(data) + size);
  try {
    auto engine = Engine::deserialize(std::move(bytes), "fuzz input");
    if (engine->target().kind != TargetKind::kCpu) return;
    // Small engines only: a valid engine may legitimately ask for a large arena.
    if (engine->context_memory_bytes() > (std::size_t{64} << 20)) return;
    auto ctx = engine->create_execution_context();
    std::map<std::string, Dims> shapes;
    for (const auto& in : engine->inputs()) shapes[in.name] = in.profile.min;
    ctx->set_input_shapes(shapes);
    std::vector<TargetBuffer> buffers;
    std::size_t total = 0;
    for (const auto* list : {&engine->inputs(), &engine->outputs()}) {
      for (const auto& t : *list) {
        const auto bytes_needed = static_cast<std::size_t>(ctx->tensor_shape(t.name).volume()) * element_size(t.dtype);
        total += bytes_needed;
        if (total > (std::size_t{64} << 20)) return;
        buffers.emplace_back(engine->target(), bytes_needed);
        buffers.back().fill(0);
        ctx->set_tensor_address(t.name, buffers.back().data());
      }
    }
    ctx->enqueue();
  } catch (const Error&) {
  }
}

}  // namespace tensoracle::fuzz
