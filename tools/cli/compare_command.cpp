// `tensoracle compare`: compares a candidate output file with a reference file and prints the metrics as JSON.
#include <cmath>
#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "tensoracle/compare.hpp"

namespace tensoracle::cli {
namespace {

struct CompareOptions {
  std::string candidate;
  std::string reference;
  double max_abs = 0, max_rel = 0, rel_l2 = 0, min_cosine = 0, min_sqnr_db = 0;
  CompareThresholds overrides;
};

int compare(const CompareOptions& options) {
  const std::vector<TensorComparison> results = compare_files(options.candidate, options.reference, options.overrides);
  std::cout << to_json(results) << "\n";
  bool passed = true;
  for (const TensorComparison& r : results) passed = passed && r.passed;
  return passed ? kExitOk : kExitFailure;
}

const char* const kDescription =
    "Compare a candidate output file with a reference file and print the error metrics as one JSON object "
    "({\"tensors\": [...], \"passed\": ...}). Both files are safetensors (tensors matched by name; a name on one "
    "side only fails) or both .npy (one tensor, named after the candidate file).";

const char* const kFooter =
    "Metrics, over the elements finite on both sides, in double (docs/compare.md):\n"
    "  max_abs_error      max |c - r|\n"
    "  max_rel_error      max |c - r| / |r| over elements with r != 0\n"
    "  mean_abs_error     mean |c - r|;  rmse  sqrt(mean (c - r)^2)\n"
    "  rel_l2_error       ||c - r|| / ||r||  (0 when both are 0, inf when only ||r|| is 0)\n"
    "  cosine_similarity  c.r / (||c|| ||r||)  (1 when both norms are 0, 0 when one is)\n"
    "  sqnr_db            10 log10(||r||^2 / ||c - r||^2)  (inf when identical)\n"
    "  p99_abs_error      99th percentile of |c - r| (NumPy's default linear method)\n"
    "NaN must face NaN and an infinity the same infinity; any other non-finite position fails. Shapes and dtypes must\n"
    "match. Default limits by dtype: rel_l2 f64 1e-12, f32 1e-5, f16 2e-3, bf16 1.6e-2, f8 1.3e-1; integers and bool\n"
    "exact (max_abs 0). A limit given here replaces the default for that metric, for every tensor.\n"
    "Non-finite metric values are written as the strings \"inf\", \"-inf\" or \"nan\"; null means not computed.\n"
    "Exit status: 0 every tensor passed; 1 a tensor failed, or a file could not be read or is invalid; 2 invalid "
    "usage.";

// A limit given on the command line: a number (infinity allowed, NaN not: it could never be met);
// the maxima must also be >= 0. CLI11's own range checks would refuse infinity.
CLI::Validator limit_validator(bool non_negative) {
  return CLI::Validator(
      [non_negative](std::string& text) {
        double value = 0;
        try {
          std::size_t used = 0;
          value = std::stod(text, &used);
          if (used != text.size()) return std::string("the limit must be a number");
        } catch (const std::exception&) {
          return std::string("the limit must be a number");
        }
        if (std::isnan(value)) return std::string("the limit must be a number, not NaN");
        if (non_negative && value < 0) return std::string("the limit must be >= 0");
        return std::string();
      },
      "", non_negative ? "LIMIT_MAX" : "LIMIT_MIN");
}

}  // namespace

void add_compare_command(CLI::App& app, Action& action) {
  auto options = std::make_shared<CompareOptions>();
  CLI::App* cmd = app.add_subcommand("compare", kDescription);
  cmd->add_option("CANDIDATE", options->candidate, "file to check (.safetensors or .npy)")->required();
  cmd->add_option("REFERENCE", options->reference, "reference file (.safetensors or .npy)")->required();
  cmd->add_option("--max-abs", options->max_abs, "fail when max_abs_error > X (X >= 0; inf allowed)")
      ->type_name("X")
      ->check(limit_validator(true));
  cmd->add_option("--max-rel", options->max_rel, "fail when max_rel_error > X (X >= 0; inf allowed)")
      ->type_name("X")
      ->check(limit_validator(true));
  cmd->add_option("--rel-l2", options->rel_l2, "fail when rel_l2_error > X (X >= 0; inf allowed)")
      ->type_name("X")
      ->check(limit_validator(true));
  cmd->add_option("--min-cosine", options->min_cosine, "fail when cosine_similarity < X")
      ->type_name("X")
      ->check(limit_validator(false));
  cmd->add_option("--min-sqnr-db", options->min_sqnr_db, "fail when sqnr_db < X")
      ->type_name("X")
      ->check(limit_validator(false));
  cmd->footer(kFooter);
  cmd->callback([&action, options, cmd] {
    auto given = [cmd](const char* flag, double value) {
      return cmd->count(flag) > 0 ? std::optional<double>(value) : std::nullopt;
    };
    options->overrides.max_abs = given("--max-abs", options->max_abs);
    options->overrides.max_rel = given("--max-rel", options->max_rel);
    options->overrides.rel_l2 = given("--rel-l2", options->rel_l2);
    options->overrides.min_cosine = given("--min-cosine", options->min_cosine);
    options->overrides.min_sqnr_db = given("--min-sqnr-db", options->min_sqnr_db);
    action = [options] { return compare(*options); };
  });
}

}  // namespace tensoracle::cli
