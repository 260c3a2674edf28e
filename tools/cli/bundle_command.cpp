// `tensoracle bundle compile|inspect|inspect-library`: produce a cubin bundle from CUDA C++ kernels, check a bundle,
// and check that a plugin library embeds exactly a bundle's cubins (docs/cubin-bundles.md).
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "tensoracle/bundle.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle::cli {
namespace {

struct BundleArguments {
  std::string spec;
  std::string out;
  std::string architectures;
  std::string nvcc;
  std::string ptxas;
  std::vector<std::string> site_packages;
  std::string bundle;
  std::string library;
  std::string allowed;
};

int run_compile(const BundleArguments& args) {
  bundle::ProducerOptions options;
  try {
    if (!args.architectures.empty()) options.architectures = bundle::parse_architectures(args.architectures, "--arch");
  } catch (const CubinArchitectureError& e) {
    std::cerr << "tensoracle: " << e.what() << "\n";
    return kExitUsage;
  }
  options.nvcc = args.nvcc;
  options.ptxas = args.ptxas;
  for (const std::string& s : args.site_packages) options.site_packages.emplace_back(s);
  bundle::compile_bundle(args.spec, args.out, options);
  std::cout << bundle::inspect_bundle(args.out).to_json() << "\n";
  return kExitOk;
}

int run_inspect(const BundleArguments& args) {
  std::vector<int> allowed;
  try {
    if (!args.allowed.empty()) allowed = bundle::parse_architectures(args.allowed, "--allow");
  } catch (const CubinArchitectureError& e) {
    std::cerr << "tensoracle: " << e.what() << "\n";
    return kExitUsage;
  }
  std::cout << bundle::inspect_bundle(args.bundle, allowed).to_json() << "\n";
  return kExitOk;
}

int run_inspect_library(const BundleArguments& args) {
  const bundle::LibraryReport report = bundle::inspect_library(args.library, args.bundle);
  std::cout << report.to_json() << "\n";
  if (!report.ok()) {
    std::cerr << fmt::format(
        "tensoracle: {} does not embed exactly bundle {}: {} of its cubins missing, {} other CUDA images, digest "
        "string {}\n",
        args.library, report.digest, report.missing.size(), report.extra.size(),
        report.digest_present ? "present" : "absent");
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

void add_bundle_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<BundleArguments>();
  CLI::App* group = app.add_subcommand(
      "bundle", "Cubin bundles for plugin libraries: compile CUDA C++ kernels into one, inspect one, check a library");
  group->require_subcommand(1);

  CLI::App* compile = group->add_subcommand(
      "compile", "Compile the CUDA C++ kernels of a kernel spec file into a bundle (no GPU needed)");
  compile
      ->add_option("SPEC", args->spec, "the kernel spec (JSON): kernels with source, entry, args, constants, threads")
      ->required();
  compile->add_option("--out", args->out, "the bundle directory to write (replaced if it holds an older bundle)")
      ->required();
  compile->add_option("--arch", args->architectures,
                      "architectures, comma-separated (default: the spec's, else sm80,sm86,sm89,sm90,sm120)");
  compile->add_option("--nvcc", args->nvcc, "nvcc to use (default: searched, see below)");
  compile->add_option("--ptxas", args->ptxas, "ptxas to use (default: searched, see below)");
  compile
      ->add_option("--site-packages", args->site_packages,
                   "a Python site-packages directory whose nvidia-cuda-nvcc wheel (nvidia/cu13/bin) is searched "
                   "first (repeatable)")
      ->allow_extra_args(false);
  compile->footer(
      "Each kernel is compiled for each architecture with nvcc --ptx -arch=compute_NN (constants as -DNAME=VALUE),\n"
      "then ptxas -arch=sm_NN. Tools given by path are used as given; others are searched in --site-packages\n"
      "nvidia/cu13/bin, then PATH, then /usr/local/cuda/bin. Every cubin's entry must take exactly the declared\n"
      "args. The bundle (bundle.json, cubins/sm<NN>/<kernel>.cubin, bundle.cpp) is written to a temporary\n"
      "directory and renamed into place: on any failure nothing is written.\n"
      "Exit status: 0 written (the bundle's report as JSON on stdout); 1 a tool is missing, a kernel failed to\n"
      "compile or does not match its declaration (the reason on stderr); 2 invalid usage.");
  compile->callback([&action, args] { action = [args] { return run_compile(*args); }; });

  CLI::App* inspect = group->add_subcommand("inspect", "Check a bundle directory and print its kernels as JSON");
  inspect->add_option("BUNDLE_DIR", args->bundle, "the directory holding bundle.json")->required();
  inspect->add_option("--allow", args->allowed, "fail unless every cubin's architecture is one of these (sm86,sm89)");
  inspect->footer(
      "Checks bundle.json (schema and digest) and every cubin: a safe relative path inside the bundle, size and\n"
      "SHA-256 as recorded, and the SM of its ELF header equal to its record's and its directory's.\n"
      "Exit status: 0 valid (the report as JSON on stdout); 1 a check failed (the reason on stderr); 2 invalid usage.");
  inspect->callback([&action, args] { action = [args] { return run_inspect(*args); }; });

  CLI::App* library = group->add_subcommand(
      "inspect-library", "Check that a plugin library embeds exactly a bundle's cubins and its digest");
  library->add_option("LIB", args->library, "the plugin shared library (.so)")->required();
  library->add_option("--bundle", args->bundle, "the bundle directory it was built from")->required();
  library->footer(
      "Scans the library for embedded CUDA ELF images and compares their SHA-256 with the bundle's cubins.\n"
      "Exit status: 0 it embeds exactly the bundle; 1 cubins are missing or extra, the digest string is absent, or\n"
      "the bundle is invalid (the JSON report on stdout when the files could be read); 2 invalid usage.");
  library->callback([&action, args] { action = [args] { return run_inspect_library(*args); }; });
}

}  // namespace tensoracle::cli
