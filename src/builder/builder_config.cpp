// Target, Precision and BuilderConfig: string forms, parsing and the canonical JSON used in cache identities.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "tensoracle/builder.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/system_info.hpp"

namespace tensoracle {

std::string Target::to_string() const {
  return kind == TargetKind::kCpu ? std::string("cpu") : fmt::format("cuda:{}", device);
}

Target Target::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text == "auto") {
    const SystemInfo info = system_info();
    return info.cuda_devices.empty() ? cpu() : cuda(info.cuda_devices.front().index);
  }
  if (text.rfind("cuda:", 0) == 0) {
    const std::string index = text.substr(5);
    if (!index.empty() && index.size() <= 4 && index.find_first_not_of("0123456789") == std::string::npos)
      return cuda(std::stoi(index));
  }
  throw InvalidArgumentError(fmt::format("target '{}' is not one of cpu, cuda, cuda:N, auto", text));
}

const char* to_string(Precision precision) noexcept {
  switch (precision) {
#define TENSORACLE_PRECISION_NAME(name, text) \
  case Precision::name: return text;
    TENSORACLE_PRECISIONS(TENSORACLE_PRECISION_NAME)
#undef TENSORACLE_PRECISION_NAME
  }
  return "?";
}

Precision parse_precision(const std::string& text) {
#define TENSORACLE_PRECISION_PARSE(name, str) \
  if (text == str) return Precision::name;
  TENSORACLE_PRECISIONS(TENSORACLE_PRECISION_PARSE)
#undef TENSORACLE_PRECISION_PARSE
  throw InvalidArgumentError(fmt::format("precision '{}' is not one of fp32, tf32, fp16, bf16", text));
}

std::string BuilderConfig::to_json() const {
  nlohmann::json j;
  j["target"] = target.to_string();
  j["precision"] = to_string(precision);
  nlohmann::json profs = nlohmann::json::object();
  for (const auto& [name, p] : profiles) {
    profs[name] = {{"min", p.min.values()}, {"opt", p.opt.values()}, {"max", p.max.values()}};
  }
  j["profiles"] = std::move(profs);
  j["max_scratch_bytes"] = max_scratch_bytes;
  j["time_kernels"] = time_kernels;
  return j.dump();  // nlohmann sorts object keys: canonical
}

}  // namespace tensoracle
