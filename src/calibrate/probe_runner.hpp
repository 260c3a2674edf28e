// Runs a calibration probe (the float network with every calibrated activation also an output) on one batch: on the
// CPU reference, or as an fp32 engine on a CUDA device, built for the batch's input shapes.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "tensoracle/builder.hpp"
#include "tensoracle/host_tensor.hpp"
#include "tensoracle/network.hpp"

namespace tensoracle::calibrate {

class ProbeRunner {
 public:
  // The probe must outlive the runner and stay unchanged; it is verified here. Nothing is built before the first run().
  ProbeRunner(const Network& probe, Target target);
  ~ProbeRunner();
  ProbeRunner(const ProbeRunner&) = delete;
  ProbeRunner& operator=(const ProbeRunner&) = delete;

  // Every output of the probe by name, on the host, for one batch (every input by name, as run_reference takes them).
  // On a CUDA target the first batch builds the engine (fp32, each step on its first candidate: no timing), and a
  // batch of other input shapes builds it again for those; batches of one shape reuse it. Throws as run_reference
  // does for missing, unknown or mismatched inputs, and CudaError / UnsupportedError when the target can't be used.
  std::map<std::string, HostTensor> run(const std::map<std::string, HostTensor>& inputs);

 private:
  struct Device;
  const Network& probe_;
  Target target_;
  std::unique_ptr<Device> device_;
};

}  // namespace tensoracle::calibrate
