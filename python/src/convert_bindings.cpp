// Python bindings of the checkpoint converter: convert_checkpoint and list_checkpoint (tensoracle.convert).
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "bindings.hpp"
#include "tensoracle/convert.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle::python {

void bind_convert(nb::module_& m) {
  m.def(
      "convert_checkpoint",
      [](const std::string& checkpoint, const std::string& output, const std::string& key,
         const std::optional<std::string>& dtype, const std::optional<std::map<std::string, std::string>>& metadata,
         const std::optional<std::string>& max_shard_size, bool no_duplicates) {
        ConvertOptions options;
        options.key = key;
        if (dtype) {
          const auto type = data_type_from_string(*dtype);
          if (!type) throw InvalidArgumentError("convert: dtype '" + *dtype + "': choose f16, bf16 or f32");
          options.dtype = *type;
        }
        options.metadata = metadata;
        if (max_shard_size) options.max_shard_size = parse_byte_size(*max_shard_size);
        options.no_duplicates = no_duplicates;
        ConvertSummary summary;
        {
          nb::gil_scoped_release release;
          summary = convert_checkpoint(checkpoint, output, options);
        }
        nb::list tensors, skipped, files;
        for (const ConvertedTensor& t : summary.tensors) {
          nb::dict d;
          d["name"] = t.name;
          d["dtype"] = std::string(safetensors_name(t.dtype));
          d["shape"] = dims_to_list(t.shape);
          d["bytes"] = t.byte_size;
          d["file"] = t.file;
          tensors.append(d);
        }
        for (const SkippedEntry& s : summary.skipped) {
          nb::dict d;
          d["name"] = s.name;
          d["type"] = s.type;
          skipped.append(d);
        }
        for (const auto& f : summary.files) files.append(f.string());
        nb::dict out;
        out["tensors"] = tensors;
        out["skipped"] = skipped;
        out["files"] = files;
        out["total_bytes"] = summary.total_bytes;
        return out;
      },
      nb::arg("checkpoint"), nb::arg("output"), nb::arg("key"), nb::arg("dtype").none(), nb::arg("metadata").none(),
      nb::arg("max_shard_size").none(), nb::arg("no_duplicates"),
      "The C++ convert_checkpoint (GIL released); returns {tensors, skipped, files, total_bytes}. Use "
      "tensoracle.convert.");
  m.def(
      "list_checkpoint",
      [](const std::string& checkpoint) {
        nb::gil_scoped_release release;
        return list_checkpoint(checkpoint);
      },
      nb::arg("checkpoint"), "The JSON text `tensoracle convert --list` prints.");
}

}  // namespace tensoracle::python
