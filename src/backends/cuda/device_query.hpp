// Queries the CUDA runtime and driver for the devices present, without failing when there are none.
#pragma once

#include "tensoracle/system_info.hpp"

namespace tensoracle::cuda {

// Fills the CUDA fields of `info`. A missing driver or device is not an error: the reason is
// stored in info.cuda_unavailable_reason.
void query_devices(SystemInfo& info);

}  // namespace tensoracle::cuda
