// libFuzzer target for engine bytes: Engine::deserialize on arbitrary bytes must throw tensoracle::Error or yield an
// engine whose contexts run (CPU engines) — never crash, hang or trip a sanitizer.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "tensoracle/engine.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/target_memory.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(data),
                               reinterpret_cast<const std::byte*>(data) + size);
  try {
    auto engine = tensoracle::Engine::deserialize(std::move(bytes), "fuzz input");
    if (engine->target().kind != tensoracle::TargetKind::kCpu) return 0;
    // Small engines only: a valid engine may legitimately ask for a large arena.
    if (engine->context_memory_bytes() > (std::size_t{64} << 20)) return 0;
    auto ctx = engine->create_execution_context();
    std::map<std::string, tensoracle::Dims> shapes;
    for (const auto& in : engine->inputs()) shapes[in.name] = in.profile.min;
    ctx->set_input_shapes(shapes);
    std::vector<tensoracle::TargetBuffer> buffers;
    std::size_t total = 0;
    for (const auto* list : {&engine->inputs(), &engine->outputs()}) {
      for (const auto& t : *list) {
        const auto bytes_needed =
            static_cast<std::size_t>(ctx->tensor_shape(t.name).volume()) * tensoracle::element_size(t.dtype);
        total += bytes_needed;
        if (total > (std::size_t{64} << 20)) return 0;
        buffers.emplace_back(engine->target(), bytes_needed);
        buffers.back().fill(0);
        ctx->set_tensor_address(t.name, buffers.back().data());
      }
    }
    ctx->enqueue();
  } catch (const tensoracle::Error&) {
  }
  return 0;
}
