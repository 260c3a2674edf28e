// `tensoracle run`: runs a JSON network on the CPU reference executor with inputs and outputs in safetensors files.
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/network.hpp"
#include "tensoracle/reference_executor.hpp"
#include "tensoracle/safetensors.hpp"

namespace tensoracle::cli {
namespace {

struct RunOptions {
  std::string network;
  std::string inputs;
  std::string output;
  std::vector<std::string> weights;
};

int run(const RunOptions& options) {
  Network network = options.weights.empty()
                        ? Network::from_json_file(options.network)
                        : Network::from_json_file(options.network,
                                                  WeightStore::open({options.weights.begin(), options.weights.end()}));
  std::map<std::string, HostTensor> inputs;
  std::vector<Tensor> declared = network.inputs();
  if (!declared.empty() || !options.inputs.empty()) {
    if (options.inputs.empty())
      throw InvalidArgumentError("the network has inputs; give them with --inputs FILE.safetensors");
    auto file = SafetensorsFile::open(options.inputs);
    for (Tensor t : declared) {
      const std::string name = network.name(t);
      const TensorInfo* info = file->find(name);
      if (info == nullptr) {
        throw InvalidArgumentError(fmt::format("{}: input '{}' ({} {}) is missing", options.inputs, name,
                                               to_string(network.dtype(t)), network.shape(t).to_string()));
      }
      if (info->dtype != network.dtype(t)) {
        throw InvalidArgumentError(fmt::format("{}: input '{}' is {}, the network expects {}", options.inputs, name,
                                               safetensors_name(info->dtype), to_string(network.dtype(t))));
      }
      inputs.emplace(name, HostTensor::from_view(file->view(*info)));
    }
    for (const TensorInfo& info : file->tensors()) {
      Tensor t = network.find(info.name);
      bool is_input = false;
      for (Tensor d : declared) is_input = is_input || d == t;
      if (!is_input)
        throw InvalidArgumentError(fmt::format("{}: '{}' is not an input of the network", options.inputs, info.name));
    }
  }
  auto start = std::chrono::steady_clock::now();
  std::map<std::string, HostTensor> outputs = run_reference(network, inputs);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::vector<TensorToWrite> tensors;
  for (const auto& [name, tensor] : outputs) tensors.push_back(tensor.to_write(name));
  write_safetensors(options.output, tensors);
  std::cerr << fmt::format("tensoracle run: {} layers on cpu (reference) in {:.2f} ms; wrote {} output(s) to {}\n",
                           network.num_layers(), ms, outputs.size(), options.output);
  return kExitOk;
}

}  // namespace

void add_run_command(CLI::App& app, Action& action) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand(
      "run",
      "Run a network described in JSON (docs/network-json.md) on the CPU reference executor. Inputs are read from a "
      "safetensors file (one tensor per network input, by name, with the declared dtype); every network output is "
      "written to the output safetensors file.");
  cmd->add_option("NETWORK", options->network, "network JSON file")->required();
  cmd->add_option("--inputs,-i", options->inputs, "safetensors file holding the inputs");
  cmd->add_option("--output,-o", options->output, "safetensors file to write the outputs to")->required();
  cmd->add_option(
      "--weights,-w", options->weights,
      "weight files (.safetensors or .safetensors.index.json); default: the files the JSON names, relative to it");
  cmd->footer(
      "Exit status: 0 success; 1 invalid network, missing or ill-shaped input, unreadable file; 2 invalid usage.");
  cmd->callback([&action, options] { action = [options] { return run(*options); }; });
}

}  // namespace tensoracle::cli
