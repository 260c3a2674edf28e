// `tensoracle convert CHECKPOINT OUTPUT.safetensors`: PyTorch checkpoints to safetensors without PyTorch, and
// `--list` to print a checkpoint's object tree.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "tensoracle/convert.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle::cli {
namespace {

struct ConvertArguments {
  std::string checkpoint;
  std::string output;
  bool list = false;
  std::string key;
  std::string dtype;
  std::vector<std::string> metadata;
  std::string max_shard_size;
  bool no_duplicates = false;
  bool quiet = false;
};

int run_convert(const ConvertArguments& args) {
  if (args.list) {
    if (!args.output.empty()) {
      std::cerr << "tensoracle: convert --list takes only the checkpoint\n";
      return kExitUsage;
    }
    std::cout << list_checkpoint(args.checkpoint) << "\n";
    return kExitOk;
  }
  if (args.output.empty()) {
    std::cerr << "tensoracle: convert needs CHECKPOINT and OUTPUT (or --list CHECKPOINT); see --help\n";
    return kExitUsage;
  }
  ConvertOptions options;
  options.key = args.key;
  options.no_duplicates = args.no_duplicates;
  try {
    if (!args.dtype.empty()) {
      auto type = data_type_from_string(args.dtype);
      if (!type || (*type != DataType::kF16 && *type != DataType::kBF16 && *type != DataType::kF32)) {
        throw InvalidArgumentError(fmt::format("--dtype {}: choose f16, bf16 or f32", args.dtype));
      }
      options.dtype = *type;
    }
    if (!args.metadata.empty()) {
      options.metadata.emplace();
      for (const std::string& entry : args.metadata) {
        const std::size_t eq = entry.find('=');
        if (eq == std::string::npos || eq == 0)
          throw InvalidArgumentError(fmt::format("--metadata {}: write KEY=VALUE", entry));
        (*options.metadata)[entry.substr(0, eq)] = entry.substr(eq + 1);
      }
    }
    if (!args.max_shard_size.empty()) options.max_shard_size = parse_byte_size(args.max_shard_size);
  } catch (const InvalidArgumentError& e) {
    std::cerr << "tensoracle: " << e.what() << "\n";
    return kExitUsage;
  }
  const ConvertSummary summary = convert_checkpoint(args.checkpoint, args.output, options);
  for (const SkippedEntry& s : summary.skipped) {
    std::cerr << escape_unprintable(fmt::format("tensoracle: note: skipped '{}' ({}): not a tensor\n", s.name, s.type));
  }
  if (!args.quiet) {
    nlohmann::ordered_json out;
    out["files"] = nlohmann::ordered_json::array();
    for (const auto& f : summary.files) out["files"].push_back(f.string());
    out["tensors"] = summary.tensors.size();
    out["total_bytes"] = summary.total_bytes;
    out["skipped"] = nlohmann::ordered_json::array();
    for (const SkippedEntry& s : summary.skipped) out["skipped"].push_back({{"name", s.name}, {"type", s.type}});
    std::cout << out.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  }
  return kExitOk;
}

}  // namespace

void add_convert_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<ConvertArguments>();
  CLI::App* cmd = app.add_subcommand(
      "convert",
      "Convert a PyTorch checkpoint (torch.save: zip or legacy format) to safetensors, without PyTorch and without "
      "running any code from the checkpoint.");
  cmd->add_option("CHECKPOINT", args->checkpoint, "the .pt/.pth/.bin file torch.save wrote")->required();
  cmd->add_option("OUTPUT", args->output, "the .safetensors file to write (with --max-shard-size: its shards' name)");
  cmd->add_flag("--list", args->list,
                "Print the checkpoint's object tree as JSON (every entry's type; tensors with dtype, shape and bytes) "
                "and the entry the conversion takes by default; write nothing");
  cmd->add_option("--key", args->key,
                  "Convert this entry (a dotted path such as model or state_dict.encoder) instead of the default: the "
                  "checkpoint itself when it is a flat mapping of tensors, else its state_dict, model or module entry");
  cmd->add_option("--dtype", args->dtype, "Cast every floating tensor to f16, bf16 or f32 (integer tensors are kept)");
  cmd->add_option("--metadata", args->metadata, "KEY=VALUE added to the header's __metadata__ (repeatable)")
      ->allow_extra_args(false);  // one value per --metadata, so that positionals after it stay positionals
  cmd->add_option("--max-shard-size", args->max_shard_size,
                  "Split into shards of at most this size (e.g. 5GiB, 500MB): OUTPUT-00001-of-0000N.safetensors "
                  "plus OUTPUT.index.json, as Hugging Face writes them");
  cmd->add_flag("--no-duplicates", args->no_duplicates,
                "Refuse checkpoints whose converted tensors share a storage (tied weights) instead of writing each "
                "such tensor as its own copy, as safetensors requires");
  cmd->add_flag("-q,--quiet", args->quiet, "Print no summary");
  cmd->footer(
      "Nested mappings become dotted names (model.encoder.weight); entries that are not tensors are skipped with a\n"
      "note on stderr. Only the data a weights checkpoint needs is read: any other global, REDUCE or BUILD in the\n"
      "pickle (os.system, builtins.eval, a class of some module) is refused, naming it. Tensors are streamed from\n"
      "the checkpoint one at a time, and every output file is written under a temporary name and renamed at the\n"
      "end, so a failure leaves no output. The files are byte-identical to what the safetensors package writes.\n"
      "Exit status: 0 converted (the summary as JSON on stdout); 1 the checkpoint could not be read, is damaged or\n"
      "is not a plain weights checkpoint (the reason on stderr, nothing written); 2 invalid usage.");
  cmd->callback([&action, args] { action = [args] { return run_convert(*args); }; });
}

}  // namespace tensoracle::cli
