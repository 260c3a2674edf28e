// `tensoracle calibrate`: activation ranges of a float network over calibration batches, and the network with
// quantize/dequantize layers inserted, written as a network JSON and a safetensors file of its new constants.
#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "tensoracle/calibrate.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle::cli {
namespace {

struct CalibrateOptions {
  std::string network;
  std::vector<std::string> batches;
  std::string output;
  std::vector<std::string> weights;
  std::string method = "max";
  double percentile = 99.99;
  std::string type = "i8";
  bool weight_only = false;
  bool per_tensor_weights = false;
  std::vector<std::string> ops = {"linear", "matmul", "conv"};
  std::vector<std::string> skip;
  bool quantize_residuals = false;
  int bins = 2048;
  std::string target = "cpu";
  bool quiet = false;
};

int calibrate(const CalibrateOptions& o) {
  CalibrationOptions options;
  options.method = parse_calibration_method(o.method);
  options.percentile = o.percentile;
  const auto type = data_type_from_string(o.type);
  if (!type || (*type != DataType::kI8 && *type != DataType::kF8E4M3)) {
    throw InvalidArgumentError(fmt::format("--type {}: give i8 or f8e4m3", o.type));
  }
  options.quantized = *type;
  options.activations = !o.weight_only;
  options.per_channel_weights = !o.per_tensor_weights;
  options.ops = o.ops;
  options.skip_layers = o.skip;
  options.quantize_residuals = o.quantize_residuals;
  options.histogram_bins = o.bins;
  options.target = Target::parse(o.target);
  if (options.activations && o.batches.empty()) {
    throw InvalidArgumentError(
        "give calibration batches with --batch FILE.safetensors (or quantize weights only with "
        "--weight-only)");
  }
  Network network = o.weights.empty()
                        ? Network::from_json_file(o.network)
                        : Network::from_json_file(o.network, WeightStore::open({o.weights.begin(), o.weights.end()}));
  Calibrator calibrator(network, options);
  if (options.activations) {
    for (std::size_t i = 0; i < o.batches.size(); ++i) {
      calibrator.add_batch(read_network_inputs(network, o.batches[i]));
      if (!o.quiet) {
        std::cerr << fmt::format("tensoracle calibrate: batch {}/{} ({})\n", i + 1, o.batches.size(), o.batches[i]);
      }
    }
  }
  const std::filesystem::path side = calibrator.write_quantized_network(o.output, o.network);
  nlohmann::json report;
  report["network"] = o.output;
  report["weights"] = side.string();
  report["method"] = std::string(to_string(options.method));
  report["type"] = o.type;
  report["batches"] = calibrator.batches();
  report["target"] = options.target.to_string();
  nlohmann::json activations = nlohmann::json::array();
  if (options.activations) {
    for (const ActivationRange& r : calibrator.activation_ranges()) {
      activations.push_back({{"tensor", r.tensor},
                             {"layers", r.layers},
                             {"max_abs", r.max_abs},
                             {"amax", r.amax},
                             {"scale", r.scale},
                             {"values", r.values}});
    }
  }
  report["activations"] = std::move(activations);
  nlohmann::json weights = nlohmann::json::array();
  for (const WeightScales& w : calibrator.weight_scales()) {
    weights.push_back({{"tensor", w.tensor},
                       {"layer", w.layer},
                       {"axis", w.axis},
                       {"channels", w.scales.size()},
                       {"scale_min", *std::min_element(w.scales.begin(), w.scales.end())},
                       {"scale_max", *std::max_element(w.scales.begin(), w.scales.end())}});
  }
  report["quantized_weights"] = std::move(weights);
  std::cout << report.dump(2) << "\n";
  return kExitOk;
}

}  // namespace

void add_calibrate_command(CLI::App& app, Action& action) {
  auto o = std::make_shared<CalibrateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "Calibrate a float network for explicit quantization (docs/precision.md): run it over calibration batches (on "
      "the CPU reference, or with --target cuda as an fp32 engine on the GPU), choose a scale for every activation "
      "that a matrix product or convolution reads, and write "
      "the network with quantize -> dequantize layers inserted there and its weights quantized (a network JSON, and "
      "beside it a safetensors file of the quantized weights and scales).");
  cmd->add_option("NETWORK", o->network, "float network JSON file")->required();
  cmd->add_option("--batch,-b", o->batches,
                  "a calibration batch: a safetensors file holding every network input by name (repeat per batch)");
  cmd->add_option("--output,-o", o->output,
                  "network JSON file to write (its constants go to the same name with "
                  ".safetensors)")
      ->required();
  cmd->add_option("--weights,-w", o->weights, "weight files; default: the files the JSON names, relative to it");
  cmd->add_option("--method,-m", o->method,
                  "how each activation's clip is chosen: max (largest |x|), percentile (of |x|), entropy (least KL "
                  "divergence of the int8-quantized distribution) or mse (least quantization error)")
      ->capture_default_str();
  cmd->add_option("--percentile", o->percentile, "the percentile of |x| for --method percentile")
      ->capture_default_str();
  cmd->add_option("--type,-t", o->type, "quantized type: i8 or f8e4m3")->capture_default_str();
  cmd->add_flag("--weight-only", o->weight_only, "quantize the weights only (no batches needed)");
  cmd->add_flag("--per-tensor-weights", o->per_tensor_weights,
                "one scale per weight instead of one per output channel");
  cmd->add_option("--ops", o->ops, "ops whose inputs are quantized")->delimiter(',')->capture_default_str();
  cmd->add_option("--skip", o->skip, "a layer (by name) to leave in float; repeat for several");
  cmd->add_flag("--quantize-residuals", o->quantize_residuals,
                "also quantize the residual input of residual adds (the add of a convolution's or linear's result and "
                "an earlier activation), as TensorRT places Q/DQ in CNN blocks: a quantized convolution then reads its "
                "residual quantized and its result stays quantized for the next block");
  cmd->add_option("--bins", o->bins, "histogram bins of |x| per activation (even, at least 128)")
      ->capture_default_str();
  cmd->add_option("--target", o->target,
                  "where the float network runs on the batches: cpu (the CPU reference), cuda[:N] (built once as an "
                  "fp32 engine on that GPU, every calibrated activation an output; built again for a batch of other "
                  "input shapes) or auto (the first GPU, else the CPU)")
      ->capture_default_str();
  cmd->add_flag("--quiet,-q", o->quiet, "no progress messages");
  cmd->footer(
      "Prints a JSON report: the files written, each activation's largest |x|, chosen clip (amax) and scale, and each "
      "quantized weight's channel count and scale range, and the target the batches ran on. Exit status: 0 written; 1 "
      "invalid network, batch or option value, unreadable file, a GPU target that can't be used (nothing is written "
      "then); 2 invalid usage.");
  cmd->callback([&action, o] { action = [o] { return calibrate(*o); }; });
}

}  // namespace tensoracle::cli
