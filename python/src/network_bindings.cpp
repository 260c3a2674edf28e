// Python bindings of Network, Tensor, WeightStore and weight views; weights, NumPy arrays and numbers become constants.
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/network.hpp"
#include "tensoracle/plugin_registry.hpp"
#include "tensoracle/safetensors.hpp"

namespace tensoracle::python {
namespace {

std::vector<std::filesystem::path> to_paths(nb::handle files) {
  std::vector<std::filesystem::path> paths;
  nb::object os = nb::module_::import_("os");
  if (nb::isinstance<nb::str>(files) || nb::hasattr(files, "__fspath__")) {
    paths.emplace_back(nb::cast<std::string>(os.attr("fspath")(files)));
    return paths;
  }
  for (nb::handle item : files) paths.emplace_back(nb::cast<std::string>(os.attr("fspath")(item)));
  return paths;
}

std::string free_constant_name(const Network& net) {
  for (int i = 0;; ++i) {
    std::string name = "constant_" + std::to_string(i);
    if (!net.find(name).valid()) return name;
  }
}

using HostArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;

// Copies a host array into the network as a constant (the network owns the copy). `as`: the dtype of the array's
// elements when its own dtype only gives their bits (ml_dtypes' arrays, viewed as unsigned integers).
Tensor add_array_constant(Network& net, const HostArray& array, const std::string& requested_name,
                          std::optional<DataType> as = std::nullopt) {
  const std::optional<DataType> dtype =
      as ? as : dlpack_data_type(array.dtype().code, array.dtype().bits, array.dtype().lanes);
  if (!dtype) {
    throw InvalidArgumentError(
        "a NumPy constant must have one of the dtypes float64, float32, float16, int64, int32, "
        "int16, int8, uint8 or bool, or ml_dtypes' bfloat16, float8_e4m3fn or float8_e5m2");
  }
  std::vector<std::int64_t> shape(array.ndim());
  for (std::size_t i = 0; i < array.ndim(); ++i) shape[i] = static_cast<std::int64_t>(array.shape(i));
  const std::string name = requested_name.empty() ? free_constant_name(net) : requested_name;
  return net.add_constant_copy(*dtype, Dims(shape), array.data(), name);
}

// ml_dtypes' bfloat16 and float8 arrays, which NumPy shows as void types: the DataType their dtype's name gives.
std::optional<DataType> extension_float_type(nb::handle value) {
  if (!nb::hasattr(value, "dtype")) return std::nullopt;
  const nb::object dtype = value.attr("dtype");
  if (!nb::hasattr(dtype, "name")) return std::nullopt;
  const std::string name = nb::cast<std::string>(nb::str(dtype.attr("name")));
  if (name == "bfloat16") return DataType::kBF16;
  if (name == "float8_e4m3fn") return DataType::kF8E4M3;
  if (name == "float8_e5m2") return DataType::kF8E5M2;
  return std::nullopt;
}

// A host array copied into the network as a constant, when `value` is one; ml_dtypes' arrays are read as their bits
// (a same-size unsigned view) with the dtype their name gives.
std::optional<Tensor> try_array_constant(Network& net, nb::handle value, const std::string& name) {
  HostArray array;
  if (const std::optional<DataType> extension = extension_float_type(value)) {
    const nb::object numpy = nb::module_::import_("numpy");
    const nb::object bits = value.attr("view")(numpy.attr(element_size(*extension) == 2 ? "uint16" : "uint8"));
    if (!nb::try_cast<HostArray>(bits, array)) {  // strided arrays are copied contiguous; this is a device array
      throw InvalidArgumentError("a " + std::string(to_string(*extension)) + " constant must be a host array");
    }
    return add_array_constant(net, array, name, extension);
  }
  if (nb::try_cast<HostArray>(value, array)) return add_array_constant(net, array, name);
  return std::nullopt;
}

Tensor add_view_constant(Network& net, const TensorView& view, const std::string& name) {
  if (name.empty()) {
    // The same weight used twice is one constant.
    const Tensor existing = net.find(view.name());
    if (existing.valid() && net.dtype(existing) == view.dtype() && net.shape(existing) == view.shape()) {
      return existing;
    }
  }
  return net.add_constant(view, name);
}

// A tensor argument: a Tensor of this network, a weight view (a zero-copy constant), a host array (copied into the
// network) or a Python number (an f32 scalar). None is the absent optional input.
Tensor as_tensor(Network& net, nb::handle value) {
  if (value.is_none()) return Tensor{};
  if (nb::isinstance<Tensor>(value)) return nb::cast<Tensor>(value);
  if (nb::isinstance<TensorView>(value)) return add_view_constant(net, nb::cast<const TensorView&>(value), {});
  if (PyBool_Check(value.ptr()) == 0 && (PyFloat_Check(value.ptr()) != 0 || PyLong_Check(value.ptr()) != 0)) {
    return net.add_scalar(nb::cast<double>(value), DataType::kF32);
  }
  if (const std::optional<Tensor> constant = try_array_constant(net, value, {})) return *constant;
  throw InvalidArgumentError("expected a Tensor, a weight (WeightStore item), a NumPy array or a number, got " +
                             nb::cast<std::string>(nb::str(value.type().attr("__name__"))));
}

std::vector<Tensor> as_tensors(Network& net, nb::handle values) {
  std::vector<Tensor> tensors;
  for (nb::handle v : values) tensors.push_back(as_tensor(net, v));
  return tensors;
}

AttrValue to_attr(const std::string& key, nb::handle value) {
  if (PyBool_Check(value.ptr()) != 0) return static_cast<std::int64_t>(value.ptr() == Py_True ? 1 : 0);
  if (PyLong_Check(value.ptr()) != 0) return nb::cast<std::int64_t>(value);
  if (PyFloat_Check(value.ptr()) != 0) return nb::cast<double>(value);
  if (nb::isinstance<nb::str>(value)) return nb::cast<std::string>(value);
  if (nb::isinstance<nb::list>(value) || nb::isinstance<nb::tuple>(value)) {
    bool all_int = true;
    for (nb::handle item : value) {
      if (PyLong_Check(item.ptr()) == 0) all_int = false;
    }
    if (all_int) return nb::cast<std::vector<std::int64_t>>(value);
    return nb::cast<std::vector<double>>(value);
  }
  throw InvalidArgumentError("attribute '" + key + "' must be an int, a float, a str or a list of numbers");
}

Attributes to_attrs(const nb::handle attrs) {
  Attributes out;
  if (attrs.is_none()) return out;
  for (auto [key, value] : nb::cast<nb::dict>(attrs)) {
    const std::string k = nb::cast<std::string>(key);
    out[k] = to_attr(k, value);
  }
  return out;
}

ConvOptions conv_options(std::vector<std::int64_t> stride, std::vector<std::int64_t> padding,
                         std::vector<std::int64_t> dilation, std::int64_t groups,
                         std::vector<std::int64_t> output_padding) {
  ConvOptions o;
  o.stride = std::move(stride);
  o.padding = std::move(padding);
  o.dilation = std::move(dilation);
  o.groups = groups;
  o.output_padding = std::move(output_padding);
  return o;
}

PoolType parse_pool(const std::string& type) {
  if (type == "max") return PoolType::kMax;
  if (type == "average" || type == "avg") return PoolType::kAverage;
  throw InvalidArgumentError("unknown pooling type '" + type + "': use max or average");
}
ResizeMode parse_resize(const std::string& mode) {
  if (mode == "nearest") return ResizeMode::kNearest;
  if (mode == "bilinear") return ResizeMode::kBilinear;
  throw InvalidArgumentError("unknown resize mode '" + mode + "': use nearest or bilinear");
}
PadMode parse_pad(const std::string& mode) {
  if (mode == "constant") return PadMode::kConstant;
  if (mode == "reflect") return PadMode::kReflect;
  if (mode == "edge") return PadMode::kEdge;
  throw InvalidArgumentError("unknown pad mode '" + mode + "': use constant, reflect or edge");
}

using I64s = std::vector<std::int64_t>;

}  // namespace

void bind_network(nb::module_& m) {
  auto plugin_dict = [](const LoadedPlugin& p) {
    nb::dict d;
    d["type"] = p.type;
    d["version"] = p.version;
    d["library"] = p.library.string();
    d["library_sha256"] = p.library_sha256;
    return d;
  };
  m.def(
      "load_plugin_library",
      [plugin_dict](const std::string& path) {
        nb::list out;
        for (const auto& p : load_plugin_library(path)) out.append(plugin_dict(p));
        return out;
      },
      nb::arg("path"),
      "Loads a plugin library (a shared library exporting tensoracle_get_plugin_creators) for this process and "
      "returns the plugins it provides as dicts (type, version, library, library_sha256). Loading it again is a "
      "no-op; libraries stay loaded until the process ends.");
  m.def(
      "loaded_plugins",
      [plugin_dict]() {
        nb::list out;
        for (const auto& p : loaded_plugins()) out.append(plugin_dict(p));
        return out;
      },
      "Every plugin loaded so far (dicts as load_plugin_library returns).");
  nb::class_<Tensor>(m, "Tensor", "A handle to one tensor of a Network (input, constant or layer output).")
      .def_ro("id", &Tensor::id, "The tensor's index in its network.")
      .def("__eq__", [](const Tensor& a, const Tensor& b) { return a == b; })
      .def("__hash__", [](const Tensor& t) { return t.id; })
      .def("__repr__", [](const Tensor& t) { return "Tensor(id=" + std::to_string(t.id) + ")"; });

  nb::class_<TensorView>(m, "Weight",
                         "A zero-copy view of one tensor of an opened safetensors file; it keeps the file mapped. Pass "
                         "it wherever a Network method takes a tensor to use it as a constant.")
      .def_prop_ro("name", &TensorView::name, "The tensor's name in its file.")
      .def_prop_ro(
          "dtype", [](const TensorView& v) { return std::string(to_string(v.dtype())); }, "Short dtype name.")
      .def_prop_ro(
          "shape", [](const TensorView& v) { return dims_to_list(v.shape()); }, "The shape as a list of ints.")
      .def_prop_ro("byte_size", &TensorView::byte_size, "Bytes of data.")
      .def_prop_ro(
          "file", [](const TensorView& v) { return v.file->path(); }, "The path of the file holding the tensor.")
      .def(
          "tobytes",
          [](const TensorView& v) { return nb::bytes(reinterpret_cast<const char*>(v.data), v.byte_size()); },
          "A copy of the tensor's little-endian bytes.")
      .def("__repr__", [](const TensorView& v) {
        return "Weight(name='" + v.name() + "', dtype='" + std::string(to_string(v.dtype())) +
               "', shape=" + v.shape().to_string() + ")";
      });

  nb::class_<WeightStore>(m, "WeightStore",
                          "Safetensors files (and sharded checkpoints' *.safetensors.index.json) opened as one "
                          "collection of named tensors, memory-mapped; weights['name'] is a zero-copy Weight.")
      .def_static(
          "open", [](nb::handle files) { return WeightStore::open(to_paths(files)); }, nb::arg("files"),
          "Opens one path or a list of paths (.safetensors files or index JSON files). Raises FormatError for an "
          "invalid file or a name found twice, IoError for a file that can't be opened.")
      .def("__getitem__", &WeightStore::get, nb::arg("name"),
           "The named weight; NotFoundError (a LookupError) if absent.")
      .def("get", &WeightStore::get, nb::arg("name"), "The named weight; NotFoundError (a LookupError) if absent.")
      .def("__contains__", &WeightStore::contains, nb::arg("name"))
      .def("__len__", [](const WeightStore& w) { return w.names().size(); })
      .def("__iter__", [](const WeightStore& w) { return nb::iter(nb::cast(w.names())); })
      .def("names", &WeightStore::names, "All tensor names, sorted.")
      .def(
          "files",
          [](const WeightStore& w) {
            std::vector<std::string> out;
            for (const auto& f : w.files()) out.push_back(f->path());
            return out;
          },
          "The paths of the opened safetensors files (shards included).");

  nb::class_<PyNetwork>(m, "Network",
                        "A network under construction. Each layer is checked when added (GraphError names the layer "
                        "and tensor). Wherever a tensor is taken, a Weight (zero-copy constant), a NumPy array "
                        "(copied into the network) or a number (an f32 scalar) may be given instead.")
      .def(nb::init<>())
      .def(
          "add_input",
          [](PyNetwork& n, const std::string& name, nb::handle dtype, const I64s& shape) {
            return n.get().add_input(name, parse_dtype(dtype), to_dims(shape));
          },
          nb::arg("name"), nb::arg("dtype"), nb::arg("shape"), "A named input; -1 marks a dynamic dimension.")
      .def(
          "add_constant",
          [](PyNetwork& n, nb::handle value, const std::string& name) {
            Network& net = n.get();
            if (nb::isinstance<TensorView>(value))
              return add_view_constant(net, nb::cast<const TensorView&>(value), name);
            if (const std::optional<Tensor> constant = try_array_constant(net, value, name)) return *constant;
            throw InvalidArgumentError("add_constant takes a Weight or a NumPy array");
          },
          nb::arg("value"), nb::arg("name") = "",
          "A constant: a Weight (zero-copy) or a NumPy array (copied; the network keeps the copy), ml_dtypes' "
          "bfloat16 and float8 arrays included.")
      .def(
          "add_scalar",
          [](PyNetwork& n, double value, nb::handle dtype, const std::string& name) {
            return n.get().add_scalar(value, parse_dtype(dtype), name);
          },
          nb::arg("value"), nb::arg("dtype") = "f32", nb::arg("name") = "", "A scalar constant held by value.")
      .def(
          "add_small_constant",
          [](PyNetwork& n, const std::vector<double>& values, nb::handle dtype, const I64s& shape,
             const std::string& name) {
            return n.get().add_small_constant(values, parse_dtype(dtype), to_dims(shape), name);
          },
          nb::arg("values"), nb::arg("dtype"), nb::arg("shape"), nb::arg("name") = "",
          "A small constant held by value (at most 4096 elements), inline in the JSON form.")
      .def(
          "mark_output", [](PyNetwork& n, Tensor t, const std::string& name) { n.get().mark_output(t, name); },
          nb::arg("tensor"), nb::arg("name"),
          "Marks a tensor as a network output under `name` (the tensor is renamed).")
      .def(
          "rename_tensor", [](PyNetwork& n, Tensor t, const std::string& name) { n.get().rename_tensor(t, name); },
          nb::arg("tensor"), nb::arg("name"), "Gives a layer output another (unique) name.")
      .def(
          "add_layer",
          [](PyNetwork& n, const std::string& op, nb::handle inputs, nb::handle attrs, const std::string& name) {
            Network& net = n.get();
            return net.add_layer(op, as_tensors(net, inputs), to_attrs(attrs), name);
          },
          nb::arg("op"), nb::arg("inputs"), nb::arg("attrs") = nb::none(), nb::arg("name") = "",
          "A layer by op name (docs/network-json.md lists ops, inputs and attributes); None is an absent optional "
          "input. Returns the list of output tensors.")
      .def(
          "add_plugin",
          [](PyNetwork& n, const std::string& type, const std::string& version, nb::handle inputs, nb::handle fields,
             const std::string& name) {
            Network& net = n.get();
            std::vector<PluginField> list;
            if (!fields.is_none()) {
              for (auto [key, value] : nb::cast<nb::dict>(fields)) {
                const std::string k = nb::cast<std::string>(key);
                list.push_back(PluginField{k, to_attr(k, value)});
              }
            }
            return net.add_plugin(type, version, as_tensors(net, inputs), list, name);
          },
          nb::arg("type"), nb::arg("version"), nb::arg("inputs"), nb::arg("fields") = nb::none(), nb::arg("name") = "",
          "A layer computed by a loaded plugin library's plugin `type` of `version` (load_plugin_library); `fields` "
          "maps names to ints, floats, strs or lists of numbers and reaches the plugin in the dict's order. Returns "
          "the list of output tensors (the plugin decides how many, their dtypes and shapes).")
      .def(
          "add_matmul",
          [](PyNetwork& n, nb::handle a, nb::handle b, bool ta, bool tb) {
            Network& net = n.get();
            return net.add_matmul(as_tensor(net, a), as_tensor(net, b), ta, tb);
          },
          nb::arg("a"), nb::arg("b"), nb::arg("transpose_a") = false, nb::arg("transpose_b") = false,
          "Batched matrix product a · b (NumPy matmul broadcasting).")
      .def(
          "add_linear",
          [](PyNetwork& n, nb::handle x, nb::handle w, nb::handle b) {
            Network& net = n.get();
            Tensor tx = as_tensor(net, x), tw = as_tensor(net, w);
            return net.add_linear(tx, tw, as_tensor(net, b));
          },
          nb::arg("x"), nb::arg("weight"), nb::arg("bias") = nb::none(), "x[..., in] · weight[out, in]ᵀ + bias[out].")
      .def(
          "add_convolution",
          [](PyNetwork& n, nb::handle x, nb::handle w, nb::handle b, I64s stride, I64s padding, I64s dilation,
             std::int64_t groups) {
            Network& net = n.get();
            Tensor tx = as_tensor(net, x), tw = as_tensor(net, w);
            return net.add_convolution(tx, tw, as_tensor(net, b), conv_options(stride, padding, dilation, groups, {}));
          },
          nb::arg("x"), nb::arg("weight"), nb::arg("bias") = nb::none(), nb::arg("stride") = I64s{},
          nb::arg("padding") = I64s{}, nb::arg("dilation") = I64s{}, nb::arg("groups") = 1,
          "Convolution over NCW / NCHW input (PyTorch's defaults); add_conv is the same method.")
      .def(
          "add_conv_transpose2d",
          [](PyNetwork& n, nb::handle x, nb::handle w, nb::handle b, I64s stride, I64s padding, I64s dilation,
             std::int64_t groups, I64s output_padding) {
            Network& net = n.get();
            Tensor tx = as_tensor(net, x), tw = as_tensor(net, w);
            return net.add_conv_transpose2d(tx, tw, as_tensor(net, b),
                                            conv_options(stride, padding, dilation, groups, output_padding));
          },
          nb::arg("x"), nb::arg("weight"), nb::arg("bias") = nb::none(), nb::arg("stride") = I64s{},
          nb::arg("padding") = I64s{}, nb::arg("dilation") = I64s{}, nb::arg("groups") = 1,
          nb::arg("output_padding") = I64s{}, "Transposed 2-D convolution (NCHW).")
      .def(
          "add_pool2d",
          [](PyNetwork& n, nb::handle x, const std::string& type, I64s kernel, I64s stride, I64s padding,
             bool ceil_mode, bool count_include_pad) {
            Network& net = n.get();
            PoolOptions o{std::move(kernel), std::move(stride), std::move(padding), ceil_mode, count_include_pad};
            return net.add_pool2d(as_tensor(net, x), parse_pool(type), o);
          },
          nb::arg("x"), nb::arg("type"), nb::arg("kernel"), nb::arg("stride") = I64s{}, nb::arg("padding") = I64s{},
          nb::arg("ceil_mode") = false, nb::arg("count_include_pad") = true,
          "2-D pooling (NCHW); type is \"max\" or \"average\".")
      .def(
          "add_global_average_pool",
          [](PyNetwork& n, nb::handle x) { return n.get().add_global_average_pool(as_tensor(n.get(), x)); },
          nb::arg("x"), "Mean over the spatial dimensions, keeping them as size 1.")
      .def(
          "add_resize",
          [](PyNetwork& n, nb::handle x, const std::string& mode, const I64s& size, bool align_corners) {
            return n.get().add_resize(as_tensor(n.get(), x), parse_resize(mode), size, align_corners);
          },
          nb::arg("x"), nb::arg("mode"), nb::arg("size"), nb::arg("align_corners") = false,
          "Resizes NCHW input to size [h, w]; mode is \"nearest\" or \"bilinear\".")
      .def(
          "add_binary",
          [](PyNetwork& n, const std::string& op, nb::handle a, nb::handle b) {
            Network& net = n.get();
            Tensor ta = as_tensor(net, a);
            return net.add_binary(op, ta, as_tensor(net, b));
          },
          nb::arg("op"), nb::arg("a"), nb::arg("b"),
          "Elementwise add, sub, mul, div, pow, max, min, equal, less or greater (NumPy broadcasting).")
      .def(
          "add_where",
          [](PyNetwork& n, nb::handle c, nb::handle a, nb::handle b) {
            Network& net = n.get();
            Tensor tc = as_tensor(net, c), ta = as_tensor(net, a);
            return net.add_where(tc, ta, as_tensor(net, b));
          },
          nb::arg("condition"), nb::arg("a"), nb::arg("b"), "condition ? a : b, elementwise.")
      .def(
          "add_unary",
          [](PyNetwork& n, const std::string& op, nb::handle x) {
            return n.get().add_unary(op, as_tensor(n.get(), x));
          },
          nb::arg("op"), nb::arg("x"),
          "Elementwise abs, neg, exp, log, sqrt, rsqrt, reciprocal, sin, cos, tanh, erf, floor, ceil or not.")
      .def(
          "add_activation",
          [](PyNetwork& n, const std::string& op, nb::handle x, nb::handle attrs) {
            return n.get().add_activation(op, as_tensor(n.get(), x), to_attrs(attrs));
          },
          nb::arg("op"), nb::arg("x"), nb::arg("attrs") = nb::none(),
          "relu, leaky_relu {alpha}, gelu {approximate: none|tanh}, silu, sigmoid, hard_sigmoid, hard_swish, "
          "softplus {beta, threshold} or clip {min, max}.")
      .def(
          "add_cast",
          [](PyNetwork& n, nb::handle x, nb::handle to) {
            return n.get().add_cast(as_tensor(n.get(), x), parse_dtype(to));
          },
          nb::arg("x"), nb::arg("to"), "Converts to another dtype.")
      .def(
          "add_softmax",
          [](PyNetwork& n, nb::handle x, std::int64_t axis, bool log) {
            return n.get().add_softmax(as_tensor(n.get(), x), axis, log);
          },
          nb::arg("x"), nb::arg("axis") = -1, nb::arg("log") = false, "Softmax (or log-softmax) along an axis.")
      .def(
          "add_layer_norm",
          [](PyNetwork& n, nb::handle x, nb::handle w, nb::handle b, double eps, std::int64_t rank) {
            Network& net = n.get();
            Tensor tx = as_tensor(net, x), tw = as_tensor(net, w);
            return net.add_layer_norm(tx, tw, as_tensor(net, b), eps, rank);
          },
          nb::arg("x"), nb::arg("weight"), nb::arg("bias"), nb::arg("epsilon") = 1e-5, nb::arg("normalized_rank") = 1,
          "Layer normalization over the last `normalized_rank` dimensions.")
      .def(
          "add_rms_norm",
          [](PyNetwork& n, nb::handle x, nb::handle w, double eps, std::int64_t rank) {
            Network& net = n.get();
            Tensor tx = as_tensor(net, x);
            return net.add_rms_norm(tx, as_tensor(net, w), eps, rank);
          },
          nb::arg("x"), nb::arg("weight"), nb::arg("epsilon") = 1e-6, nb::arg("normalized_rank") = 1,
          "RMS normalization over the last `normalized_rank` dimensions.")
      .def(
          "add_batch_norm",
          [](PyNetwork& n, nb::handle x, nb::handle mean, nb::handle var, nb::handle w, nb::handle b, double eps) {
            Network& net = n.get();
            Tensor tx = as_tensor(net, x), tm = as_tensor(net, mean), tv = as_tensor(net, var), tw = as_tensor(net, w);
            return net.add_batch_norm(tx, tm, tv, tw, as_tensor(net, b), eps);
          },
          nb::arg("x"), nb::arg("mean"), nb::arg("var"), nb::arg("weight"), nb::arg("bias"), nb::arg("epsilon") = 1e-5,
          "Batch normalization with running statistics (inference).")
      .def(
          "add_group_norm",
          [](PyNetwork& n, nb::handle x, std::int64_t groups, nb::handle w, nb::handle b, double eps) {
            Network& net = n.get();
            Tensor tx = as_tensor(net, x), tw = as_tensor(net, w);
            return net.add_group_norm(tx, groups, tw, as_tensor(net, b), eps);
          },
          nb::arg("x"), nb::arg("num_groups"), nb::arg("weight"), nb::arg("bias"), nb::arg("epsilon") = 1e-5,
          "Group normalization.")
      .def(
          "add_instance_norm",
          [](PyNetwork& n, nb::handle x, nb::handle w, nb::handle b, double eps) {
            Network& net = n.get();
            Tensor tx = as_tensor(net, x), tw = as_tensor(net, w);
            return net.add_instance_norm(tx, tw, as_tensor(net, b), eps);
          },
          nb::arg("x"), nb::arg("weight"), nb::arg("bias"), nb::arg("epsilon") = 1e-5, "Instance normalization.")
      .def(
          "add_reduce",
          [](PyNetwork& n, const std::string& op, nb::handle x, const I64s& axes, bool keep_dims) {
            return n.get().add_reduce(op, as_tensor(n.get(), x), axes, keep_dims);
          },
          nb::arg("op"), nb::arg("x"), nb::arg("axes"), nb::arg("keep_dims") = false,
          "Reduction (sum, mean, max, min or prod) over axes.")
      .def(
          "add_arg_reduce",
          [](PyNetwork& n, bool max, nb::handle x, std::int64_t axis, bool keep_dims) {
            return n.get().add_arg_reduce(max, as_tensor(n.get(), x), axis, keep_dims);
          },
          nb::arg("max"), nb::arg("x"), nb::arg("axis"), nb::arg("keep_dims") = false,
          "Index (i64) of the maximum (max=True) or minimum along an axis.")
      .def(
          "add_top_k",
          [](PyNetwork& n, nb::handle x, std::int64_t k, std::int64_t axis, bool largest) {
            return n.get().add_top_k(as_tensor(n.get(), x), k, axis, largest);
          },
          nb::arg("x"), nb::arg("k"), nb::arg("axis") = -1, nb::arg("largest") = true,
          "The k largest (or smallest) values along an axis: (values, indices).")
      .def(
          "add_reshape",
          [](PyNetwork& n, nb::handle x, const I64s& shape) {
            return n.get().add_reshape(as_tensor(n.get(), x), shape);
          },
          nb::arg("x"), nb::arg("shape"), "Reshape; 0 copies the input's dimension, -1 infers one.")
      .def(
          "add_transpose",
          [](PyNetwork& n, nb::handle x, const I64s& perm) {
            return n.get().add_transpose(as_tensor(n.get(), x), perm);
          },
          nb::arg("x"), nb::arg("perm"), "Permutes dimensions.")
      .def(
          "add_slice",
          [](PyNetwork& n, nb::handle x, const I64s& starts, const I64s& ends, const I64s& axes, const I64s& steps) {
            return n.get().add_slice(as_tensor(n.get(), x), starts, ends, axes, steps);
          },
          nb::arg("x"), nb::arg("starts"), nb::arg("ends"), nb::arg("axes"), nb::arg("steps") = I64s{},
          "Slices along axes (ONNX semantics).")
      .def(
          "add_concat",
          [](PyNetwork& n, nb::handle xs, std::int64_t axis) {
            return n.get().add_concat(as_tensors(n.get(), xs), axis);
          },
          nb::arg("xs"), nb::arg("axis"), "Concatenates along an axis.")
      .def(
          "add_split",
          [](PyNetwork& n, nb::handle x, const I64s& sizes, std::int64_t axis) {
            return n.get().add_split(as_tensor(n.get(), x), sizes, axis);
          },
          nb::arg("x"), nb::arg("sizes"), nb::arg("axis"), "Splits into pieces of the given sizes along an axis.")
      .def(
          "add_gather",
          [](PyNetwork& n, nb::handle data, nb::handle indices, std::int64_t axis) {
            Network& net = n.get();
            Tensor td = as_tensor(net, data);
            return net.add_gather(td, as_tensor(net, indices), axis);
          },
          nb::arg("data"), nb::arg("indices"), nb::arg("axis") = 0, "Gathers slices of data by indices along an axis.")
      .def(
          "add_squeeze",
          [](PyNetwork& n, nb::handle x, const I64s& axes) { return n.get().add_squeeze(as_tensor(n.get(), x), axes); },
          nb::arg("x"), nb::arg("axes"), "Removes size-1 dimensions.")
      .def(
          "add_unsqueeze",
          [](PyNetwork& n, nb::handle x, const I64s& axes) {
            return n.get().add_unsqueeze(as_tensor(n.get(), x), axes);
          },
          nb::arg("x"), nb::arg("axes"), "Inserts size-1 dimensions.")
      .def(
          "add_expand",
          [](PyNetwork& n, nb::handle x, const I64s& shape) {
            return n.get().add_expand(as_tensor(n.get(), x), shape);
          },
          nb::arg("x"), nb::arg("shape"), "Broadcasts to a shape.")
      .def(
          "add_pad",
          [](PyNetwork& n, nb::handle x, const I64s& pads, const std::string& mode, double value) {
            return n.get().add_pad(as_tensor(n.get(), x), pads, parse_pad(mode), value);
          },
          nb::arg("x"), nb::arg("pads"), nb::arg("mode") = "constant", nb::arg("value") = 0.0,
          "Pads; pads is [begin_0 .. begin_{r-1}, end_0 .. end_{r-1}], mode constant, reflect or edge.")
      .def(
          "add_attention",
          [](PyNetwork& n, nb::handle q, nb::handle k, nb::handle v, nb::handle mask, bool causal,
             std::optional<double> scale) {
            Network& net = n.get();
            Tensor tq = as_tensor(net, q), tk = as_tensor(net, k), tv = as_tensor(net, v);
            AttentionOptions o;
            o.causal = causal;
            o.scale = scale;
            return net.add_attention(tq, tk, tv, as_tensor(net, mask), o);
          },
          nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("mask") = nb::none(), nb::arg("causal") = false,
          nb::arg("scale") = nb::none(),
          "Scaled dot-product attention: q [B,Hq,Sq,D], k [B,Hkv,Skv,D], v [B,Hkv,Skv,Dv]; mask bool (true = "
          "attend) or additive; scale defaults to 1/sqrt(D).")
      .def(
          "add_rotary_embedding",
          [](PyNetwork& n, nb::handle x, double base, std::int64_t rotary_dim, bool interleaved, std::int64_t offset) {
            RotaryOptions o{base, rotary_dim, interleaved, offset};
            return n.get().add_rotary_embedding(as_tensor(n.get(), x), o);
          },
          nb::arg("x"), nb::arg("base") = 10000.0, nb::arg("rotary_dim") = 0, nb::arg("interleaved") = false,
          nb::arg("position_offset") = 0, "Rotary position embedding of x [B, H, S, D].")
      .def(
          "add_quantize",
          [](PyNetwork& n, nb::handle x, nb::handle scale, nb::handle to, std::int64_t axis) {
            Network& net = n.get();
            Tensor tx = as_tensor(net, x);
            return net.add_quantize(tx, as_tensor(net, scale), parse_dtype(to), axis);
          },
          nb::arg("x"), nb::arg("scale"), nb::arg("to"), nb::arg("axis") = 0,
          "Symmetric quantization to i8 or f8e4m3 (scale per tensor or per channel along axis).")
      .def(
          "add_dequantize",
          [](PyNetwork& n, nb::handle x, nb::handle scale, nb::handle to, std::int64_t axis) {
            Network& net = n.get();
            Tensor tx = as_tensor(net, x);
            return net.add_dequantize(tx, as_tensor(net, scale), parse_dtype(to), axis);
          },
          nb::arg("x"), nb::arg("scale"), nb::arg("to") = "f32", nb::arg("axis") = 0, "Symmetric dequantization.")
      .def(
          "name", [](const PyNetwork& n, Tensor t) { return n.get().name(t); }, nb::arg("tensor"), "A tensor's name.")
      .def(
          "dtype", [](const PyNetwork& n, Tensor t) { return std::string(to_string(n.get().dtype(t))); },
          nb::arg("tensor"), "A tensor's short dtype name.")
      .def(
          "shape", [](const PyNetwork& n, Tensor t) { return dims_to_list(n.get().shape(t)); }, nb::arg("tensor"),
          "A tensor's static shape (-1 where it depends on dynamic input dimensions).")
      .def(
          "dim_expression", [](const PyNetwork& n, Tensor t, int axis) { return n.get().dim_expression(t, axis); },
          nb::arg("tensor"), nb::arg("axis"), "The expression of one dimension, e.g. \"x.0 * 12\".")
      .def(
          "find",
          [](const PyNetwork& n, const std::string& name) -> std::optional<Tensor> {
            Tensor t = n.get().find(name);
            if (!t.valid()) return std::nullopt;
            return t;
          },
          nb::arg("name"), "The tensor of that name, or None.")
      .def(
          "inputs", [](const PyNetwork& n) { return n.get().inputs(); }, "The input tensors.")
      .def(
          "outputs", [](const PyNetwork& n) { return n.get().outputs(); }, "The output tensors.")
      .def(
          "num_layers", [](const PyNetwork& n) { return n.get().num_layers(); }, "Number of layers.")
      .def(
          "verify", [](const PyNetwork& n) { n.get().verify(); },
          "Whole-network checks (an output exists, every input is used, output names unique); raises GraphError.")
      .def(
          "infer_shapes",
          [](const PyNetwork& n, const std::map<std::string, I64s>& shapes) {
            std::map<std::string, Dims> in;
            for (const auto& [k, v] : shapes) in[k] = Dims(v);
            std::map<std::string, I64s> out;
            for (const auto& [k, v] : n.get().infer_shapes(in)) out[k] = v.values();
            return out;
          },
          nb::arg("input_shapes"), "Concrete shapes of every tensor for the given input shapes.")
      .def(
          "to_json", [](const PyNetwork& n) { return n.get().to_json(); },
          "The JSON form (docs/network-json.md); weights are written as references, never as bytes.")
      .def_static(
          "from_json",
          [](const std::string& json, const WeightStore* weights) {
            PyNetwork out;
            out.network.emplace(Network::from_json(json, weights != nullptr ? *weights : WeightStore::open({})));
            return out;
          },
          nb::arg("json"), nb::arg("weights").none() = nb::none(),
          "Rebuilds a network from its JSON form, resolving weight references in `weights`.")
      .def_static(
          "from_json_file",
          [](const std::string& path, const WeightStore* weights) {
            PyNetwork out;
            if (weights != nullptr) {
              out.network.emplace(Network::from_json_file(path, *weights));
            } else {
              out.network.emplace(Network::from_json_file(path));
            }
            return out;
          },
          nb::arg("path"), nb::arg("weights").none() = nb::none(),
          "Reads a network JSON file; without `weights` the weight files it names are opened (relative to it).");
  // add_conv: the short name the issue and the reference's users expect.
  nb::object network_class = m.attr("Network");
  network_class.attr("add_conv") = network_class.attr("add_convolution");
}

}  // namespace tensoracle::python
