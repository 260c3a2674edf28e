// Umbrella header: everything a model package or application needs from tensoracle.
#pragma once

#include "tensoracle/data_type.hpp"
#include "tensoracle/dims.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/float_convert.hpp"
#include "tensoracle/logging.hpp"
#include "tensoracle/safetensors.hpp"
#include "tensoracle/sha256.hpp"
#include "tensoracle/system_info.hpp"
#include "tensoracle/version.hpp"
