// Python bindings of cubin bundles (tensoracle.bundle, tensoracle.producer): cubin_sm, parameter records, inspection,
// the CUDA C++ producer and the bundle writer the Triton producer uses.
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "tensoracle/bundle.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle::python {
namespace {

namespace bundle = tensoracle::bundle;

std::vector<std::uint8_t> to_bytes(const nb::bytes& data) {
  const auto* p = static_cast<const std::uint8_t*>(data.data());
  return std::vector<std::uint8_t>(p, p + data.size());
}

template <typename T>
T item(const nb::dict& d, const char* key, const char* where) {
  if (!d.contains(key)) throw InvalidArgumentError(std::string(where) + ": '" + key + "' is missing");
  try {
    return nb::cast<T>(d[key]);
  } catch (const nb::cast_error&) {
    throw InvalidArgumentError(std::string(where) + ": '" + key + "' has the wrong type");
  }
}

bundle::Arg to_arg(const nb::dict& d) {
  bundle::Arg a;
  a.name = item<std::string>(d, "name", "bundle arg");
  const std::string type = item<std::string>(d, "type", "bundle arg");
  const auto t = bundle::arg_type_from_name(type);
  if (!t) throw InvalidArgumentError("bundle arg '" + a.name + "': unknown type '" + type + "'");
  a.type = *t;
  a.count = item<int>(d, "count", "bundle arg");
  a.divisibility = item<int>(d, "divisibility", "bundle arg");
  return a;
}

// A compiled kernel from the Triton producer's dict: the record's fields and "cubins": [{sm, data, shared_bytes,
// scratch_bytes}].
bundle::CompiledKernel to_compiled_kernel(const nb::dict& d) {
  bundle::CompiledKernel k;
  bundle::KernelRecord& r = k.record;
  r.name = item<std::string>(d, "name", "bundle kernel");
  const std::string where = "bundle kernel '" + r.name + "'";
  r.entry = item<std::string>(d, "entry", where.c_str());
  const std::string kind = item<std::string>(d, "kind", where.c_str());
  const auto parsed = bundle::kernel_kind_from_name(kind);
  if (!parsed) throw InvalidArgumentError(where + ": unknown kind '" + kind + "'");
  r.kind = *parsed;
  for (nb::handle a : item<nb::list>(d, "args", where.c_str())) r.args.push_back(to_arg(nb::cast<nb::dict>(a)));
  for (const auto& [name, value] : item<std::map<std::string, std::string>>(d, "constants", where.c_str())) {
    r.constants.push_back({name, value});
  }
  r.threads = item<int>(d, "threads", where.c_str());
  r.scratch_pointers = item<int>(d, "scratch_pointers", where.c_str());
  r.source = item<std::string>(d, "source", where.c_str());
  r.source_sha256 = item<std::string>(d, "source_sha256", where.c_str());
  for (nb::handle c : item<nb::list>(d, "cubins", where.c_str())) {
    const nb::dict cd = nb::cast<nb::dict>(c);
    bundle::CompiledCubin cubin;
    cubin.sm = item<int>(cd, "sm", where.c_str());
    cubin.bytes = to_bytes(item<nb::bytes>(cd, "data", where.c_str()));
    cubin.shared_bytes = item<std::uint32_t>(cd, "shared_bytes", where.c_str());
    cubin.scratch_bytes = item<std::uint64_t>(cd, "scratch_bytes", where.c_str());
    k.cubins.push_back(std::move(cubin));
  }
  return k;
}

}  // namespace

void bind_bundle(nb::module_& m) {
  m.def(
      "bundle_cubin_sm",
      [](const nb::bytes& data, const std::string& where) { return bundle::cubin_sm(data.data(), data.size(), where); },
      nb::arg("data"), nb::arg("where"), "The C++ cubin_sm. Use tensoracle.bundle.cubin_sm.");
  m.def(
      "bundle_kernel_params",
      [](const nb::bytes& data, const std::string& entry) {
        nb::list out;
        for (const bundle::CubinParam& p : bundle::cubin_kernel_params(data.data(), data.size(), entry)) {
          out.append(nb::make_tuple(p.ordinal, p.offset, p.size));
        }
        return out;
      },
      nb::arg("data"), nb::arg("entry"), "The (ordinal, offset, size) of each parameter of a cubin's kernel entry.");
  m.def("bundle_default_architectures", &bundle::default_architectures,
        "The architectures the producer compiles for by default (SMs).");
  m.def(
      "bundle_parse_architectures", [](const std::string& text) { return bundle::parse_architectures(text); },
      nb::arg("text"), "\"sm86,sm120\" → [86, 120]; CubinArchitectureError for anything unknown.");
  m.def(
      "bundle_check_relative_path",
      [](const std::string& path, const std::string& what) { bundle::check_relative_path(path, what); },
      nb::arg("path"), nb::arg("what"), "BundleError unless the path is a safe relative path.");
  m.def(
      "bundle_inspect",
      [](const std::string& directory, const std::vector<int>& allowed) {
        nb::gil_scoped_release release;
        return bundle::inspect_bundle(directory, allowed).to_json();
      },
      nb::arg("directory"), nb::arg("allowed"), "inspect_bundle's report as JSON text. Use tensoracle.bundle.");
  m.def(
      "bundle_inspect_library",
      [](const std::string& library, const std::string& directory) {
        nb::gil_scoped_release release;
        return bundle::inspect_library(library, directory).to_json();
      },
      nb::arg("library"), nb::arg("directory"), "inspect_library's report as JSON text. Use tensoracle.bundle.");
  m.def(
      "bundle_produce",
      [](const std::string& spec_json, const std::string& source_root, const std::string& out,
         const std::vector<int>& architectures, const std::string& nvcc, const std::string& ptxas,
         const std::vector<std::string>& site_packages, const nb::list& compiled_kernels,
         const std::map<std::string, std::string>& tools, const std::vector<std::string>& order) {
        std::vector<bundle::CompiledKernel> extra;
        for (nb::handle k : compiled_kernels) extra.push_back(to_compiled_kernel(nb::cast<nb::dict>(k)));
        nb::gil_scoped_release release;
        bundle::ProducerOptions options;
        options.architectures = architectures;
        options.nvcc = nvcc;
        options.ptxas = ptxas;
        for (const std::string& s : site_packages) options.site_packages.emplace_back(s);
        bundle::KernelSpecFile spec;
        if (!spec_json.empty()) spec = bundle::parse_kernel_spec(spec_json, "kernel specs");
        bundle::CompiledKernels compiled = bundle::compile_cuda_kernels(spec, source_root, options);
        for (auto& k : extra) compiled.kernels.push_back(std::move(k));
        // The caller's order, whichever compiler made each kernel.
        const auto rank = [&order](const bundle::CompiledKernel& k) {
          return std::find(order.begin(), order.end(), k.record.name) - order.begin();
        };
        std::stable_sort(compiled.kernels.begin(), compiled.kernels.end(),
                         [&](const auto& a, const auto& b) { return rank(a) < rank(b); });
        for (const auto& [tool, version] : tools) {
          const auto it = compiled.tools.find(tool);
          if (it != compiled.tools.end() && it->second != version) {
            throw BundleError("bundle: the CUDA C++ kernels were compiled with " + tool + " " + it->second +
                              " and the others with " + version + "; use one " + tool + " for the whole bundle");
          }
          compiled.tools[tool] = version;
        }
        bundle::write_bundle(std::move(compiled.kernels), compiled.architectures, compiled.tools, out);
        return bundle::inspect_bundle(out).to_json();
      },
      nb::arg("spec_json"), nb::arg("source_root"), nb::arg("out"), nb::arg("architectures"), nb::arg("nvcc"),
      nb::arg("ptxas"), nb::arg("site_packages"), nb::arg("compiled_kernels"), nb::arg("tools"), nb::arg("order"),
      "Compiles the CUDA C++ kernels of a kernel spec (JSON text, may be empty), adds already compiled kernels, and "
      "writes the bundle (GIL released); returns its inspect report as JSON text. Use tensoracle.producer.");
  m.def(
      "bundle_find_tool",
      [](const std::string& name, const std::string& explicit_path, const std::vector<std::string>& site_packages) {
        std::vector<std::filesystem::path> sites(site_packages.begin(), site_packages.end());
        return bundle::find_tool(name, explicit_path, sites).string();
      },
      nb::arg("name"), nb::arg("explicit_path"), nb::arg("site_packages"),
      "The path of a CUDA tool (explicit, else the nvidia-cuda-nvcc wheel, PATH, /usr/local/cuda/bin); "
      "NotFoundError naming the package and the paths searched.");
  m.def(
      "bundle_tool_version", [](const std::string& tool) { return bundle::cuda_tool_version(tool); }, nb::arg("tool"),
      "\"13.0.88\" from a CUDA tool's --version.");
}

}  // namespace tensoracle::python
