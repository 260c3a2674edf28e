// Python bindings of open_engine, cache listing and pruning, and tensor comparison.
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.hpp"
#include "tensoracle/cache.hpp"
#include "tensoracle/compare.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/host_tensor.hpp"

namespace tensoracle::python {
namespace {

using I64s = std::vector<std::int64_t>;
using SpecTuple = std::tuple<std::string, nb::object, I64s>;

std::vector<TensorSpec> to_specs(const std::vector<SpecTuple>& specs) {
  std::vector<TensorSpec> out;
  for (const auto& [name, dtype, shape] : specs) out.push_back(TensorSpec{name, parse_dtype(dtype), Dims(shape)});
  return out;
}

std::filesystem::path cache_directory(const std::string& dir) {
  return dir.empty() ? default_cache_directory() : std::filesystem::path(dir);
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

HostTensor to_host_tensor(nb::handle dtype, const I64s& shape, const nb::bytes& data) {
  HostTensor t;
  t.dtype = parse_dtype(dtype);
  t.shape = Dims(shape);
  t.bytes.resize(data.size());
  if (data.size() != 0) std::memcpy(t.bytes.data(), data.c_str(), data.size());
  return t;
}

}  // namespace

void bind_cache(nb::module_& m) {
  m.def(
      "open_engine",
      [](const std::string& name, std::int64_t graph_version, const std::vector<SpecTuple>& inputs,
         const std::vector<SpecTuple>& outputs, const BuilderConfig& builder, const std::vector<std::string>& plugins,
         const std::vector<std::string>& weight_files, nb::callable graph, const std::string& cache_dir,
         bool force_rebuild) {
        EngineDeclaration declaration;
        declaration.name = name;
        declaration.graph_version = graph_version;
        declaration.inputs = to_specs(inputs);
        declaration.outputs = to_specs(outputs);
        declaration.builder = builder;
        for (const auto& p : plugins) declaration.plugin_libraries.emplace_back(p);
        std::vector<std::filesystem::path> files(weight_files.begin(), weight_files.end());
        OpenEngineOptions options;
        options.cache_dir = cache_dir;
        options.force_rebuild = force_rebuild;
        // The callable stays alive through this call's argument; the library may copy the std::function on threads
        // without the GIL, so it captures the bare pointer rather than a reference-counted object.
        PyObject* graph_function = graph.ptr();
        GraphFunction graph_fn = [graph_function](const WeightStore& weights) -> Network {
          nb::gil_scoped_acquire acquire;
          nb::object result = nb::handle(graph_function)(nb::cast(weights));
          if (!nb::isinstance<PyNetwork>(result)) {
            throw InvalidArgumentError("the graph function must return a tensoracle.Network, not " +
                                       nb::cast<std::string>(nb::str(result.type().attr("__name__"))));
          }
          PyNetwork& network = nb::cast<PyNetwork&>(result);
          Network out = std::move(network.get());
          network.network.reset();
          return out;
        };
        EngineHandle handle;
        {
          nb::gil_scoped_release release;
          handle = open_engine(declaration, files, graph_fn, options);
        }
        return std::make_tuple(PyEngine{handle.engine}, handle.path.string(), handle.built, handle.conditions_json);
      },
      nb::arg("name"), nb::arg("graph_version"), nb::arg("inputs"), nb::arg("outputs"), nb::arg("builder"),
      nb::arg("plugins"), nb::arg("weight_files"), nb::arg("graph"), nb::arg("cache_dir"), nb::arg("force_rebuild"),
      "The C++ open_engine: returns (engine, path, built, conditions_json). Use tensoracle.open_engine.");

  m.def(
      "read_engine_header",
      [](const std::string& path) {
        const EngineHeader h = read_engine_header(path);
        nb::dict d;
        d["conditions_json"] = h.conditions_json;
        d["plan_sha256"] = h.plan_sha256 ? nb::cast(*h.plan_sha256) : nb::none();
        d["shape_tensor_outputs"] = nb::cast(h.shape_tensor_outputs);
        d["file_size"] = h.file_size;
        d["plan_offset"] = h.plan_offset;
        return d;
      },
      nb::arg("path"),
      "Reads and checks an engine file's magic, header length and header (never the plan): {conditions_json, "
      "plan_sha256, shape_tensor_outputs, file_size, plan_offset}. CorruptEngineError for a damaged header.");

  m.def(
      "default_cache_directory", [] { return default_cache_directory().string(); },
      "$XDG_CACHE_HOME/tensoracle, else ~/.cache/tensoracle (nothing is created).");

  m.def(
      "list_cache",
      [](const std::string& dir) {
        const std::filesystem::path directory = cache_directory(dir);
        nb::gil_scoped_release release;
        return to_json(list_cache(directory));
      },
      nb::arg("cache_dir") = "", "The JSON `tensoracle cache list` prints.");

  m.def(
      "prune_cache",
      [](const std::string& dir, const std::string& unused_for, const std::string& max_size, bool dry_run) {
        if (unused_for.empty() == max_size.empty()) {
          throw InvalidArgumentError("prune needs exactly one of unused_for (days) and max_size (bytes or a size)");
        }
        PruneCriteria criteria;
        if (!unused_for.empty()) {
          criteria.mode = PruneCriteria::Mode::kUnusedFor;
          criteria.unused_for_days = parse_prune_days(unused_for);
        } else {
          criteria.mode = PruneCriteria::Mode::kMaxSize;
          criteria.max_size_bytes = parse_prune_size(max_size);
        }
        criteria.now_ns = now_ns();
        const std::filesystem::path directory = cache_directory(dir);
        nb::gil_scoped_release release;
        const PrunePlan plan = plan_prune(list_cache(directory), criteria);
        const PruneResult result = execute_prune(plan, dry_run);
        return std::make_tuple(to_json(plan, dry_run), to_json(result));
      },
      nb::arg("cache_dir"), nb::arg("unused_for"), nb::arg("max_size"), nb::arg("dry_run"),
      "The two JSON documents (plan, result) `tensoracle cache prune` prints.");

  m.def(
      "compare_tensors",
      [](const std::string& name, nb::handle candidate_dtype, const I64s& candidate_shape, nb::bytes candidate_data,
         nb::handle reference_dtype, const I64s& reference_shape, nb::bytes reference_data,
         const std::map<std::string, double>& limits) {
        const HostTensor candidate = to_host_tensor(candidate_dtype, candidate_shape, candidate_data);
        const HostTensor reference = to_host_tensor(reference_dtype, reference_shape, reference_data);
        CompareThresholds overrides;
        for (const auto& [key, value] : limits) {
          if (key == "max_abs") {
            overrides.max_abs = value;
          } else if (key == "max_rel") {
            overrides.max_rel = value;
          } else if (key == "rel_l2") {
            overrides.rel_l2 = value;
          } else if (key == "min_cosine") {
            overrides.min_cosine = value;
          } else if (key == "min_sqnr_db") {
            overrides.min_sqnr_db = value;
          } else {
            throw InvalidArgumentError("unknown comparison limit '" + key +
                                       "': use max_abs, max_rel, rel_l2, min_cosine or min_sqnr_db");
          }
        }
        nb::gil_scoped_release release;
        const CompareThresholds thresholds = CompareThresholds::for_dtype(reference.dtype).with_overrides(overrides);
        return to_json({compare_tensors(name, candidate, reference, thresholds)});
      },
      nb::arg("name"), nb::arg("candidate_dtype"), nb::arg("candidate_shape"), nb::arg("candidate_data"),
      nb::arg("reference_dtype"), nb::arg("reference_shape"), nb::arg("reference_data"), nb::arg("limits"),
      "compare_tensors on raw bytes with the reference dtype's default limits overridden by `limits`; returns the "
      "JSON `tensoracle compare` prints. Use tensoracle.compare.");
}

}  // namespace tensoracle::python
