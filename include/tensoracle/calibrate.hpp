// Calibration for explicit quantization: runs a float network on caller batches (on the CPU reference, or as an fp32
// engine on a CUDA GPU), collects the
// range of every activation that a matrix product or convolution reads, and gives the network back with
// quantize/dequantize layers (and quantized weights) inserted at the chosen scales.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tensoracle/builder.hpp"
#include "tensoracle/host_tensor.hpp"
#include "tensoracle/network.hpp"

namespace tensoracle {

// How an activation's clipping value (amax, its scale being amax / the quantized type's largest value) is chosen
// from the |x| it took over the calibration batches (docs/precision.md):
//   kMax        the largest |x| seen;
//   kPercentile the given percentile of |x| (99.99 by default);
//   kEntropy    the threshold whose 128-level quantization of the |x| distribution loses the least information (KL
//               divergence, TensorRT's entropy calibration; int8 only);
//   kMse        the threshold whose quantize-dequantize of the |x| distribution has the least mean squared error.
enum class CalibrationMethod { kMax, kPercentile, kEntropy, kMse };

std::string_view to_string(CalibrationMethod method) noexcept;
// "max", "percentile", "entropy" or "mse"; InvalidArgumentError otherwise.
CalibrationMethod parse_calibration_method(std::string_view text);

struct CalibrationOptions {
  CalibrationMethod method = CalibrationMethod::kMax;
  double percentile = 99.99;           // kPercentile, in (0, 100]
  DataType quantized = DataType::kI8;  // kI8 or kF8E4M3
  bool activations = true;             // false: weight-only (weights quantized; activations left as they are)
  bool per_channel_weights = true;     // one weight scale per output channel; false: one per weight
  std::vector<std::string> ops = {"linear", "matmul", "conv"};  // layers whose inputs are quantized
  std::vector<std::string> skip_layers;                         // layers (by name) left in float
  // Also quantize the residual input of residual adds (an `add` of a quantized product's result, or its batch_norm's,
  // and an activation that is neither): a CNN's quantized convolution then reads its residual quantized and its
  // result can stay quantized for the next block (docs/precision.md).
  bool quantize_residuals = false;
  int histogram_bins = 2048;  // even, at least 128
  // Where the float network runs on the batches: the CPU reference (Target::cpu(), the default), or a CUDA device
  // (Target::cuda(n)), where the network is built once as an fp32 engine with every calibrated activation an output
  // (each step on its first kernel, no timing; built again when a batch has other input shapes) and the activations
  // come back to the host for the histograms. Both give the same ranges up to the f32 rounding of the sums.
  Target target;
};

// One calibrated activation: a tensor that quantized layers read.
struct ActivationRange {
  std::string tensor;
  std::vector<std::string> layers;  // the quantized layers that read it
  double max_abs = 0;               // the largest |x| seen
  double amax = 0;                  // the clip the method chose (0 when every value was 0)
  double scale = 0;                 // amax / the quantized type's largest value (1 when amax is 0)
  std::uint64_t values = 0;         // values seen
};

// One quantized weight.
struct WeightScales {
  std::string tensor;          // the float weight
  std::string layer;           // the layer that reads it
  std::int64_t axis = -1;      // the channel axis of per-channel scales; -1 for one scale
  std::vector<double> scales;  // per channel (or one)
};

class Calibrator {
 public:
  // The network must outlive the calibrator and stay unchanged. Throws InvalidArgumentError for invalid options or
  // a network with no layer to quantize.
  explicit Calibrator(const Network& network, CalibrationOptions options = {});
  ~Calibrator();
  Calibrator(const Calibrator&) = delete;
  Calibrator& operator=(const Calibrator&) = delete;

  // Runs the network on one batch (every input by name, as run_reference takes them) on options().target and records
  // the activations. On a CUDA target the first batch (and one of new input shapes) builds the engine first; CudaError
  // when the device can't be used, UnsupportedError in a build without the CUDA backend.
  void add_batch(const std::map<std::string, HostTensor>& inputs);
  std::size_t batches() const noexcept;

  const CalibrationOptions& options() const noexcept;
  // The activations' ranges and scales at this point (in the order of their first reader). Throws
  // InvalidArgumentError before the first batch when activations are quantized.
  std::vector<ActivationRange> activation_ranges() const;
  // The weights' scales (from the weights themselves; no batch needed).
  std::vector<WeightScales> weight_scales() const;

  // The network with quantize -> dequantize (to the original dtype) on every calibrated activation where the quantized
  // layers read it, and every constant weight they read replaced by its quantized constant (i8 or f8e4m3, named
  // "<weight>.quantized") and a dequantize with its scales ("<weight>.scale", f32). The quantized weights and scales
  // are constants the network keeps (add_constant_copy).
  Network quantized_network() const;

  // quantized_network() as a network JSON file and, beside it, the safetensors file (`<json stem>.safetensors`) of the
  // constants it made and of those the network held in memory; the JSON names the original weight files relative to
  // its own folder (`source` is the original JSON's path, against which the original network's relative weight paths
  // are resolved; empty: against the working directory). Both files are written atomically. Returns the safetensors
  // path.
  std::filesystem::path write_quantized_network(const std::filesystem::path& json,
                                                const std::filesystem::path& source = {}) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tensoracle
