// Python bindings of BuilderConfig, Builder, Engine and ExecutionContext, and the reader of DLPack capsules.
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "tensoracle/builder.hpp"
#include "tensoracle/engine.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/pointer_location.hpp"

namespace tensoracle::python {
namespace {

// The DLPack ABI (dlpack.h, stable since v0.5): only what is read here.
struct DLDevice {
  std::int32_t device_type;
  std::int32_t device_id;
};
struct DLDataType {
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  std::int32_t ndim;
  DLDataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;
  std::uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};

using I64s = std::vector<std::int64_t>;

ShapeProfile to_profile(const std::string& input, nb::handle value) {
  if (nb::isinstance<nb::dict>(value)) {
    nb::dict d = nb::cast<nb::dict>(value);
    return ShapeProfile{Dims(nb::cast<I64s>(d["min"])), Dims(nb::cast<I64s>(d["opt"])), Dims(nb::cast<I64s>(d["max"]))};
  }
  nb::list items = nb::list(value);
  if (items.size() == 3 && !PyLong_Check(items[0].ptr())) {
    return ShapeProfile{Dims(nb::cast<I64s>(items[0])), Dims(nb::cast<I64s>(items[1])), Dims(nb::cast<I64s>(items[2]))};
  }
  if (items.size() == 0 || PyLong_Check(items[0].ptr()) != 0) {
    Dims fixed(nb::cast<I64s>(items));
    return ShapeProfile{fixed, fixed, fixed};
  }
  throw InvalidArgumentError("profile of input '" + input +
                             "' must be (min, opt, max) shapes, a dict with min/opt/max, or one fixed shape");
}

nb::dict profile_to_dict(const ShapeProfile& p) {
  nb::dict d;
  d["min"] = dims_to_list(p.min);
  d["opt"] = dims_to_list(p.opt);
  d["max"] = dims_to_list(p.max);
  return d;
}

nb::list engine_tensors(const std::vector<EngineTensor>& tensors, bool with_profile) {
  nb::list out;
  for (const EngineTensor& t : tensors) {
    nb::dict d;
    d["name"] = t.name;
    d["dtype"] = std::string(to_string(t.dtype));
    d["shape"] = dims_to_list(t.dims);
    if (with_profile) d["profile"] = profile_to_dict(t.profile);
    out.append(d);
  }
  return out;
}

CUstream_st* to_stream(std::uintptr_t stream) { return reinterpret_cast<CUstream_st*>(stream); }

std::vector<std::byte> to_byte_vector(const nb::bytes& data) {
  const auto* begin = reinterpret_cast<const std::byte*>(data.c_str());
  return std::vector<std::byte>(begin, begin + data.size());
}

}  // namespace

void bind_engine(nb::module_& m) {
  nb::class_<BuilderConfig>(m, "BuilderConfig",
                            "Everything a build depends on besides the network and its weights: target (\"cpu\", "
                            "\"cuda\", \"cuda:N\" or \"auto\"), precision (fp32, tf32, fp16, bf16), one shape profile "
                            "per input with -1 dims, the scratch-memory limit and whether kernels are timed.")
      .def(
          "__init__",
          [](BuilderConfig* self, const std::string& target, const std::string& precision, nb::handle profiles,
             std::size_t max_scratch_bytes, bool time_kernels, const std::string& timing_cache) {
            BuilderConfig* c = new (self) BuilderConfig();
            c->target = Target::parse(target);
            c->precision = parse_precision(precision);
            if (!profiles.is_none()) {
              for (auto [key, value] : nb::cast<nb::dict>(profiles)) {
                const std::string name = nb::cast<std::string>(key);
                c->profiles[name] = to_profile(name, value);
              }
            }
            c->max_scratch_bytes = max_scratch_bytes;
            c->time_kernels = time_kernels;
            c->timing_cache = timing_cache;
          },
          nb::kw_only(), nb::arg("target") = "cpu", nb::arg("precision") = "fp32", nb::arg("profiles") = nb::none(),
          nb::arg("max_scratch_bytes") = std::size_t{256} << 20, nb::arg("time_kernels") = true,
          nb::arg("timing_cache") = "",
          "profiles maps an input name to (min, opt, max) shapes (or a dict with those keys, or one fixed shape).")
      .def_prop_rw(
          "target", [](const BuilderConfig& c) { return c.target.to_string(); },
          [](BuilderConfig& c, const std::string& t) { c.target = Target::parse(t); }, "\"cpu\" or \"cuda:N\".")
      .def_prop_rw(
          "precision", [](const BuilderConfig& c) { return std::string(to_string(c.precision)); },
          [](BuilderConfig& c, const std::string& p) { c.precision = parse_precision(p); }, "fp32, tf32, fp16 or bf16.")
      .def_prop_ro(
          "profiles",
          [](const BuilderConfig& c) {
            nb::dict d;
            for (const auto& [name, p] : c.profiles) d[name.c_str()] = profile_to_dict(p);
            return d;
          },
          "A copy of the profiles: {input: {min, opt, max}}.")
      .def_rw("max_scratch_bytes", &BuilderConfig::max_scratch_bytes, "Upper bound on per-context scratch memory.")
      .def_rw("time_kernels", &BuilderConfig::time_kernels,
              "Time candidate kernels on the target and keep the fastest (False: the first that fits).")
      .def_prop_rw(
          "timing_cache", [](const BuilderConfig& c) { return c.timing_cache.string(); },
          [](BuilderConfig& c, const std::string& path) { c.timing_cache = path; },
          "Timing cache file (\"\": none): kernel choices reused instead of timed again, and this build's added. "
          "Not a build condition.")
      .def_prop_rw(
          "plugin_libraries",
          [](const BuilderConfig& c) {
            std::vector<std::string> paths;
            for (const auto& p : c.plugin_libraries) paths.push_back(p.string());
            return paths;
          },
          [](BuilderConfig& c, const std::vector<std::string>& paths) {
            c.plugin_libraries.assign(paths.begin(), paths.end());
          },
          "Plugin libraries loaded before the build (load_plugin_library). Not a build condition: open_engine's "
          "conditions hold EngineDeclaration.plugins' digests.")
      .def(
          "add_profile",
          [](BuilderConfig& c, const std::string& input, const I64s& min, const I64s& opt, const I64s& max) {
            c.add_profile(input, Dims(min), Dims(opt), Dims(max));
          },
          nb::arg("input"), nb::arg("min"), nb::arg("opt"), nb::arg("max"), "Sets the shape range of one input.")
      .def("to_json", &BuilderConfig::to_json, "Canonical JSON of every setting (the cache identity's part).")
      .def("__repr__", [](const BuilderConfig& c) { return "BuilderConfig(" + c.to_json() + ")"; });

  nb::class_<Builder>(m, "Builder", "Builds engines; build() may run on several threads at once.")
      .def(nb::init<BuilderConfig>(), nb::arg("config"))
      .def(
          "build",
          [](const Builder& b, const PyNetwork& n) {
            const Network& net = n.get();
            std::vector<std::byte> bytes;
            {
              nb::gil_scoped_release release;
              bytes = b.build(net);
            }
            return nb::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
          },
          nb::arg("network"),
          "Verifies, optimizes and compiles the network; returns the serialized engine. Raises GraphError, "
          "InvalidArgumentError (profiles), UnsupportedError or CudaError.")
      .def_prop_ro("config", &Builder::config, "The configuration.");

  nb::class_<PyEngine>(m, "Engine", "A deserialized engine: immutable, shareable between threads.")
      .def_static(
          "deserialize",
          [](nb::bytes data, const std::string& display_name) {
            std::vector<std::byte> bytes = to_byte_vector(data);
            nb::gil_scoped_release release;
            return PyEngine{Engine::deserialize(std::move(bytes), display_name)};
          },
          nb::arg("data"), nb::arg("display_name") = "engine bytes",
          "Validates and loads engine bytes (FormatError when damaged, UnsupportedError for another target).")
      .def_static(
          "load",
          [](const std::string& path) {
            nb::gil_scoped_release release;
            return PyEngine{Engine::load(path)};
          },
          nb::arg("path"), "Reads and deserializes an engine (plan) file.")
      .def_static(
          "inspect",
          [](nb::bytes data, const std::string& display_name) {
            std::vector<std::byte> bytes = to_byte_vector(data);
            return Engine::inspect(bytes, display_name);
          },
          nb::arg("data"), nb::arg("display_name") = "engine bytes",
          "Validates engine bytes without loading them and returns the manifest JSON text.")
      .def_prop_ro(
          "inputs", [](const PyEngine& e) { return engine_tensors(e.engine->inputs(), true); },
          "The inputs: [{name, dtype, shape, profile}].")
      .def_prop_ro(
          "outputs", [](const PyEngine& e) { return engine_tensors(e.engine->outputs(), false); },
          "The outputs: [{name, dtype, shape}].")
      .def_prop_ro(
          "target", [](const PyEngine& e) { return e.engine->target().to_string(); }, "\"cpu\" or \"cuda:N\".")
      .def_prop_ro(
          "precision", [](const PyEngine& e) { return std::string(to_string(e.engine->precision())); },
          "The precision it was built for.")
      .def(
          "manifest_json", [](const PyEngine& e) { return e.engine->manifest_json(); },
          "The manifest as JSON text (what `tensoracle inspect` prints).")
      .def_prop_ro(
          "weight_bytes", [](const PyEngine& e) { return e.engine->weight_bytes(); }, "Bytes of weights on the target.")
      .def_prop_ro(
          "context_memory_bytes", [](const PyEngine& e) { return e.engine->context_memory_bytes(); },
          "Bytes each execution context allocates.")
      .def(
          "create_execution_context",
          [](const PyEngine& e) { return PyExecutionContext{e.engine->create_execution_context()}; },
          "A new execution context with its own activation memory.");

  nb::class_<PyExecutionContext>(m, "ExecutionContext",
                                 "Runs an engine: set shapes, query outputs, bind addresses, enqueue. One thread at a "
                                 "time.")
      .def(
          "set_input_shapes",
          [](PyExecutionContext& c, const std::map<std::string, I64s>& shapes) {
            std::map<std::string, Dims> dims;
            for (const auto& [k, v] : shapes) dims[k] = Dims(v);
            c.context->set_input_shapes(dims);
          },
          nb::arg("shapes"), "Sets the shapes of all ranged inputs together; InvalidArgumentError names the input.")
      .def(
          "shapes_ready", [](const PyExecutionContext& c) { return c.context->shapes_ready(); },
          "True when every input has a concrete shape.")
      .def(
          "tensor_shape",
          [](const PyExecutionContext& c, const std::string& name) {
            return dims_to_list(c.context->tensor_shape(name));
          },
          nb::arg("name"), "Concrete shape of an input or output.")
      .def(
          "tensor_dtype",
          [](const PyExecutionContext& c, const std::string& name) {
            return std::string(to_string(c.context->tensor_dtype(name)));
          },
          nb::arg("name"), "Short dtype name of an input or output.")
      .def(
          "set_tensor_address",
          [](PyExecutionContext& c, const std::string& name, std::uintptr_t address) {
            c.context->set_tensor_address(name, reinterpret_cast<void*>(address));
          },
          nb::arg("name"), nb::arg("address"), "Binds an input or output to memory at an integer address.")
      .def(
          "tensor_address",
          [](const PyExecutionContext& c, const std::string& name) {
            return reinterpret_cast<std::uintptr_t>(c.context->tensor_address(name));
          },
          nb::arg("name"), "The bound address (0 when unbound).")
      .def(
          "enqueue",
          [](PyExecutionContext& c, std::uintptr_t stream) {
            nb::gil_scoped_release release;
            c.context->enqueue(to_stream(stream));
          },
          nb::arg("stream") = 0, "Runs the engine on a CUDA stream handle (CPU engines: 0; runs to completion).")
      .def_prop_rw(
          "graph_mode", [](const PyExecutionContext& c) { return c.context->graph_mode(); },
          [](PyExecutionContext& c, bool enabled) { c.context->set_graph_mode(enabled); },
          "Graph mode: enqueue launches a CUDA graph of the engine, captured on first use and again after a shape or "
          "address change (ExecutionContext::set_graph_mode).")
      .def_prop_ro(
          "graph_captures", [](const PyExecutionContext& c) { return c.context->graph_captures(); },
          "How many times graph mode captured the engine.")
      .def(
          "enqueue_profiled",
          [](PyExecutionContext& c, std::uintptr_t stream) {
            std::vector<ExecutionContext::StepTiming> timings;
            {
              nb::gil_scoped_release release;
              timings = c.context->enqueue_profiled(to_stream(stream));
            }
            nb::list out;
            for (const auto& t : timings) {
              nb::dict d;
              d["layer"] = t.layer;
              d["kernel"] = t.kernel;
              d["milliseconds"] = t.milliseconds;
              out.append(d);
            }
            return out;
          },
          nb::arg("stream") = 0, "Enqueues with timing around each step, synchronizes, returns per-step times.");

  m.def(
      "locate_pointer",
      [](std::uintptr_t address) {
        const PointerLocation where = locate_pointer(reinterpret_cast<const void*>(address));
        const char* kind = "unknown";
        switch (where.kind) {
          case MemoryKind::kHost: kind = "host"; break;
          case MemoryKind::kPinnedHost: kind = "pinned_host"; break;
          case MemoryKind::kDevice: kind = "device"; break;
          case MemoryKind::kManaged: kind = "managed"; break;
          case MemoryKind::kUnknown: break;
        }
        return nb::make_tuple(kind, where.device);
      },
      nb::arg("address"),
      "Where CUDA says an address points: (kind, device) with kind 'host', 'pinned_host', 'device', 'managed' or "
      "'unknown' (no CUDA backend or driver) and device -1 unless device or managed memory.");

  m.def(
      "dlpack_info",
      [](nb::handle capsule) {
        DLManagedTensor* managed = nullptr;
        if (PyCapsule_IsValid(capsule.ptr(), "dltensor") != 0) {
          managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
        }
        if (managed == nullptr) {
          PyErr_Clear();
          throw InvalidArgumentError("__dlpack__() did not return an unconsumed 'dltensor' capsule");
        }
        const DLTensor& t = managed->dl_tensor;
        nb::dict d;
        d["data"] = reinterpret_cast<std::uintptr_t>(t.data) + t.byte_offset;
        d["device_type"] = t.device.device_type;
        d["device_id"] = t.device.device_id;
        const std::optional<DataType> dtype = dlpack_data_type(t.dtype.code, t.dtype.bits, t.dtype.lanes);
        d["dtype"] = dtype ? nb::cast(std::string(to_string(*dtype))) : nb::none();
        nb::list shape;
        for (std::int32_t i = 0; i < t.ndim; ++i) shape.append(t.shape[i]);
        d["shape"] = shape;
        if (t.strides != nullptr) {
          nb::list strides;
          for (std::int32_t i = 0; i < t.ndim; ++i) strides.append(t.strides[i]);
          d["strides"] = strides;
        } else {
          d["strides"] = nb::none();
        }
        return d;
      },
      nb::arg("capsule"),
      "Reads a DLPack capsule without consuming it: {data, device_type, device_id, dtype (short name, or None "
      "for a type tensoracle lacks), shape, strides (elements, or None for C order)}. The producer keeps ownership; "
      "keep the capsule alive while the "
      "memory is used.");
}

}  // namespace tensoracle::python
