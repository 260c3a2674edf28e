// Entry point of the nanobind extension tensoracle._tensoracle, and the dtype and shape conversions every binding uses.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "bindings.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/logging.hpp"
#include "tensoracle/version.hpp"

namespace tensoracle::python {

Network& PyNetwork::get() {
  if (!network) {
    throw InvalidArgumentError(
        "this Network was handed to open_engine by its graph function and can no longer be used; define a new one");
  }
  return *network;
}
const Network& PyNetwork::get() const { return const_cast<PyNetwork*>(this)->get(); }

namespace {

// NumPy's dtype names (bf16 and f8 as ml_dtypes names them): the one table for both directions.
constexpr std::pair<const char*, DataType> kNumpyNames[] = {{"float64", DataType::kF64},
                                                            {"float32", DataType::kF32},
                                                            {"float16", DataType::kF16},
                                                            {"bfloat16", DataType::kBF16},
                                                            {"float8_e4m3fn", DataType::kF8E4M3},
                                                            {"float8_e5m2", DataType::kF8E5M2},
                                                            {"int64", DataType::kI64},
                                                            {"int32", DataType::kI32},
                                                            {"int16", DataType::kI16},
                                                            {"int8", DataType::kI8},
                                                            {"uint8", DataType::kU8},
                                                            {"bool", DataType::kBool}};

}  // namespace

std::string numpy_name(DataType type) {
  for (const auto& [name, t] : kNumpyNames) {
    if (t == type) return name;
  }
  throw UnsupportedError(std::string("no NumPy name for dtype ") + std::string(to_string(type)));
}

std::optional<DataType> dlpack_data_type(std::uint8_t code, std::uint8_t bits, std::uint16_t lanes) {
  using Code = nb::dlpack::dtype_code;
  if (lanes != 1) return std::nullopt;
  switch (static_cast<Code>(code)) {
    case Code::Float:
      if (bits == 64) return DataType::kF64;
      if (bits == 32) return DataType::kF32;
      if (bits == 16) return DataType::kF16;
      break;
    case Code::Bfloat:
      if (bits == 16) return DataType::kBF16;
      break;
    case Code::Int:
      if (bits == 64) return DataType::kI64;
      if (bits == 32) return DataType::kI32;
      if (bits == 16) return DataType::kI16;
      if (bits == 8) return DataType::kI8;
      break;
    case Code::UInt:
      if (bits == 8) return DataType::kU8;
      break;
    case Code::Bool:
      if (bits == 8) return DataType::kBool;
      break;
    default: break;
  }
  return std::nullopt;
}

DataType parse_dtype(nb::handle value) {
  std::string text;
  if (nb::isinstance<nb::str>(value)) {
    text = nb::cast<std::string>(value);
  } else {
    // numpy.float32, numpy.dtype("float16"), ml_dtypes.bfloat16, ...: NumPy names them.
    nb::object numpy = nb::module_::import_("numpy");
    text = nb::cast<std::string>(numpy.attr("dtype")(value).attr("name"));
  }
  if (auto type = data_type_from_string(text)) return *type;
  if (auto type = data_type_from_safetensors_name(text)) return *type;
  for (const auto& [name, type] : kNumpyNames) {
    if (text == name) return type;
  }
  throw InvalidArgumentError("unknown dtype '" + text +
                             "': use f64, f32, f16, bf16, f8e4m3, f8e5m2, i64, i32, i16, i8, u8 or bool (or the "
                             "NumPy or safetensors name of one)");
}

Dims to_dims(const std::vector<std::int64_t>& values) { return Dims(values); }

nb::list dims_to_list(const Dims& dims) {
  nb::list list;
  for (std::int64_t d : dims) list.append(d);
  return list;
}

}  // namespace tensoracle::python

NB_MODULE(_tensoracle, m) {
  namespace py = tensoracle::python;
  namespace nb = nanobind;
  m.doc() = "tensoracle's C++ library as a Python extension (use the `tensoracle` package, which wraps it).";
  m.attr("__version__") = TENSORACLE_VERSION_STRING;
  py::bind_errors(m);
  py::bind_network(m);
  py::bind_engine(m);
  py::bind_cache(m);
  py::bind_convert(m);
  py::bind_bundle(m);
  py::bind_calibrate(m);

  m.def(
      "dtype_name", [](nb::handle dtype) { return std::string(tensoracle::to_string(py::parse_dtype(dtype))); },
      nb::arg("dtype"), "The short name (\"f32\", \"bf16\", ...) of a dtype given by any accepted spelling.");
  m.def(
      "numpy_name", [](nb::handle dtype) { return py::numpy_name(py::parse_dtype(dtype)); }, nb::arg("dtype"),
      "NumPy's name of a dtype (\"float32\"; ml_dtypes' names for bf16 and f8).");
  m.def(
      "element_size", [](nb::handle dtype) { return tensoracle::element_size(py::parse_dtype(dtype)); },
      nb::arg("dtype"), "Bytes of one element of a dtype.");
  m.def(
      "set_log_level",
      [](const std::string& level) {
        static const std::map<std::string, tensoracle::LogSeverity> levels = {
            {"error", tensoracle::LogSeverity::kError},
            {"warning", tensoracle::LogSeverity::kWarning},
            {"info", tensoracle::LogSeverity::kInfo},
            {"verbose", tensoracle::LogSeverity::kVerbose}};
        auto it = levels.find(level);
        if (it == levels.end()) {
          throw tensoracle::InvalidArgumentError("unknown log level '" + level +
                                                 "': use error, warning, info or verbose");
        }
        tensoracle::set_log_level(it->second);
      },
      nb::arg("level"), "Sets the library's log level: \"error\", \"warning\" (default), \"info\" or \"verbose\".");
  m.def(
      "set_log_callback",
      [](nb::object callback) {
        if (callback.is_none()) {
          tensoracle::set_log_callback({});
          return;
        }
        if (PyCallable_Check(callback.ptr()) == 0)
          throw nb::type_error("set_log_callback: the callback must be callable (severity, message), or None");
        // Shared by the library's copies of the callback: the last one to go (possibly on a library thread) releases
        // the Python object with the GIL held.
        std::shared_ptr<nb::object> held(new nb::object(std::move(callback)), [](nb::object* object) {
          if (Py_IsInitialized() == 0) return;  // the interpreter is gone: leak rather than touch it
          nb::gil_scoped_acquire gil;
          delete object;
        });
        tensoracle::set_log_callback([held](tensoracle::LogSeverity severity, std::string_view message) {
          if (Py_IsInitialized() == 0) return;
          nb::gil_scoped_acquire gil;
          try {
            (*held)(std::string(tensoracle::to_string(severity)), std::string(message));
          } catch (nb::python_error& e) {
            e.discard_as_unraisable("tensoracle log callback");  // a log message must never fail the library call
          }
        });
      },
      nb::arg("callback").none(),
      "Sends the library's messages to callback(severity, message) instead of stderr (None restores stderr). "
      "Severity is \"error\", \"warning\", \"info\" or \"verbose\"; messages below set_log_level() are not sent. "
      "The callback may be called from the library's threads (builds run without the GIL); it is called with the "
      "GIL held, and an exception it raises is reported through sys.unraisablehook and dropped.");
}
