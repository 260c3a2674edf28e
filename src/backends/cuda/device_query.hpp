// Queries the CUDA runtime and driver for the devices present, without failing when there are none.
#pragma once

#include "tensoracle/system_info.hpp"

namespace tensoracle::cuda {

// Fills the CUDA fields of `info`. A missing driver or device is not an error: the reason is
// stored in info.cuda_unavailable_reason. cuBLASLt's version comes from the library opened beside the driver's start
// (cublaslt_library.hpp); 0 where it cannot be opened.
void query_devices(SystemInfo& info);

// query_devices without cuBLASLt's version (which waits for its library to open): the runtime's, the driver's and
// cuDNN's versions and the devices, for picking a device.
void list_devices(SystemInfo& info);

}  // namespace tensoracle::cuda
