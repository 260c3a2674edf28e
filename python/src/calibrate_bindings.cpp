// Python bindings of calibration: the C++ Calibrator on a Network, batches given as (name, dtype, shape, bytes)
// tuples (tensoracle.Calibrator wraps it for NumPy arrays).
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.hpp"
#include "tensoracle/calibrate.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/host_tensor.hpp"

namespace tensoracle::python {
namespace {

// A Calibrator over a Python Network, which it keeps alive; every call checks that open_engine has not taken the
// network away meanwhile (the calibrator refers to it).
struct PyCalibrator {
  nb::object owner;
  PyNetwork* network;
  std::unique_ptr<Calibrator> calibrator;

  Calibrator& get() {
    network->get();  // throws when the network was moved out
    return *calibrator;
  }
};

using BatchTensor = std::tuple<std::string, nb::object, std::vector<std::int64_t>, nb::bytes>;

nb::list ranges_list(const std::vector<ActivationRange>& ranges) {
  nb::list out;
  for (const auto& r : ranges) {
    nb::dict d;
    d["tensor"] = r.tensor;
    nb::list layers;
    for (const auto& l : r.layers) layers.append(l);
    d["layers"] = layers;
    d["max_abs"] = r.max_abs;
    d["amax"] = r.amax;
    d["scale"] = r.scale;
    d["values"] = r.values;
    out.append(d);
  }
  return out;
}

nb::list weights_list(const std::vector<WeightScales>& weights) {
  nb::list out;
  for (const auto& w : weights) {
    nb::dict d;
    d["tensor"] = w.tensor;
    d["layer"] = w.layer;
    d["axis"] = w.axis;
    nb::list scales;
    for (double s : w.scales) scales.append(s);
    d["scales"] = scales;
    out.append(d);
  }
  return out;
}

}  // namespace

void bind_calibrate(nb::module_& m) {
  nb::class_<PyCalibrator>(m, "_Calibrator", "The C++ Calibrator; use tensoracle.Calibrator.")
      .def(
          "__init__",
          [](PyCalibrator* self, nb::object network, const std::string& method, double percentile, nb::object quantized,
             bool activations, bool per_channel_weights, const std::vector<std::string>& ops,
             const std::vector<std::string>& skip_layers, int bins, bool quantize_residuals,
             const std::string& target) {
            CalibrationOptions options;
            options.method = parse_calibration_method(method);
            options.percentile = percentile;
            options.quantized = parse_dtype(quantized);
            options.activations = activations;
            options.per_channel_weights = per_channel_weights;
            options.ops = ops;
            options.skip_layers = skip_layers;
            options.histogram_bins = bins;
            options.quantize_residuals = quantize_residuals;
            options.target = Target::parse(target);
            PyNetwork* py = nb::cast<PyNetwork*>(network);
            new (self) PyCalibrator{network, py, std::make_unique<Calibrator>(py->get(), options)};
          },
          nb::arg("network"), nb::arg("method"), nb::arg("percentile"), nb::arg("quantized"), nb::arg("activations"),
          nb::arg("per_channel_weights"), nb::arg("ops"), nb::arg("skip_layers"), nb::arg("bins"),
          nb::arg("quantize_residuals") = false, nb::arg("target") = "cpu")
      .def(
          "add_batch",
          [](PyCalibrator& self, const std::vector<BatchTensor>& tensors) {
            std::map<std::string, HostTensor> inputs;
            for (const auto& [name, dtype, shape, data] : tensors) {
              HostTensor t(parse_dtype(dtype), Dims(shape));
              if (t.bytes.size() != data.size()) {
                throw InvalidArgumentError("calibration batch: input '" + name + "' has " +
                                           std::to_string(data.size()) + " bytes for its shape and dtype's " +
                                           std::to_string(t.bytes.size()));
              }
              if (!t.bytes.empty()) std::memcpy(t.bytes.data(), data.c_str(), t.bytes.size());
              inputs.emplace(name, std::move(t));
            }
            Calibrator& calibrator = self.get();
            nb::gil_scoped_release release;
            calibrator.add_batch(inputs);
          },
          nb::arg("tensors"))
      .def_prop_ro("batches", [](PyCalibrator& self) { return self.get().batches(); })
      .def("activation_ranges", [](PyCalibrator& self) { return ranges_list(self.get().activation_ranges()); })
      .def("weight_scales", [](PyCalibrator& self) { return weights_list(self.get().weight_scales()); })
      .def("quantized_network",
           [](PyCalibrator& self) {
             PyNetwork out;
             out.network.emplace(self.get().quantized_network());
             return out;
           })
      .def(
          "write_quantized_network",
          [](PyCalibrator& self, const std::string& json, const std::string& source) {
            return self.get().write_quantized_network(json, source).string();
          },
          nb::arg("json"), nb::arg("source"));
}

}  // namespace tensoracle::python
