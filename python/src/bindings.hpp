// Shared declarations of the nanobind extension tensoracle._tensoracle: the binding groups and conversion helpers.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tensoracle/data_type.hpp"
#include "tensoracle/dims.hpp"
#include "tensoracle/engine.hpp"
#include "tensoracle/network.hpp"

namespace tensoracle::python {

namespace nb = nanobind;

// A Network owned by Python. open_engine moves the network out of the object its graph function returned, so every
// method checks that it is still there instead of touching a moved-from Network.
struct PyNetwork {
  std::optional<Network> network{std::in_place};

  Network& get();
  const Network& get() const;
};

// An Engine owned by Python (shared with its executions and with EngineHandle).
struct PyEngine {
  std::shared_ptr<const Engine> engine;
};

// An execution context; it keeps its engine alive through the context's own reference.
struct PyExecutionContext {
  std::unique_ptr<ExecutionContext> context;
};

// A dtype from a short name ("f32"), a safetensors name ("F32"), a NumPy name ("float32"), or any object NumPy's
// dtype() accepts. Throws InvalidArgumentError listing what is accepted.
DataType parse_dtype(nb::handle value);
// NumPy's name of a dtype ("float32"; ml_dtypes' names for bf16 and f8).
std::string numpy_name(DataType type);
// The dtype of a DLPack (code, bits, lanes) triple, as DLPack capsules and nanobind arrays give it; none for
// vectors and types tensoracle lacks.
std::optional<DataType> dlpack_data_type(std::uint8_t code, std::uint8_t bits, std::uint16_t lanes);
Dims to_dims(const std::vector<std::int64_t>& values);
nb::list dims_to_list(const Dims& dims);

void bind_errors(nb::module_& m);
void bind_network(nb::module_& m);
void bind_engine(nb::module_& m);
void bind_cache(nb::module_& m);
void bind_convert(nb::module_& m);
void bind_bundle(nb::module_& m);
void bind_calibrate(nb::module_& m);

}  // namespace tensoracle::python
