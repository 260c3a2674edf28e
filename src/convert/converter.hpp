// The converter's pieces below the public API, for the fuzz target and the unit tests: the listing of a checkpoint
// already read.
#pragma once

#include <string>

#include "convert/torch_checkpoint.hpp"

namespace tensoracle::convert {

// The JSON text list_checkpoint prints, for a checkpoint read from any source (`display` names it).
std::string checkpoint_json(const TorchCheckpoint& checkpoint, const std::string& display);

}  // namespace tensoracle::convert
