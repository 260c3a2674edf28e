// `tensoracle cache list|prune`: inspect saved engines and remove old ones (metadata and headers only, docs/cache.md).
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include "commands.hpp"
#include "tensoracle/cache.hpp"
#include "tensoracle/error.hpp"

namespace tensoracle::cli {
namespace {

struct CacheOptions {
  std::string cache_dir;  // empty: the default directory
  std::string unused_for;
  std::string max_size;
  bool dry_run = false;
};

std::filesystem::path directory_of(const CacheOptions& options) {
  return options.cache_dir.empty() ? default_cache_directory() : std::filesystem::path(options.cache_dir);
}

std::int64_t now_ns() {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

int run_list(const CacheOptions& options) {
  const CacheListing listing = list_cache(directory_of(options));
  std::cout << to_json(listing) << "\n";
  return kExitOk;
}

int run_prune(const CacheOptions& options) {
  PruneCriteria criteria;
  if (options.unused_for.empty() == options.max_size.empty()) {
    std::cerr << "tensoracle: cache prune needs exactly one of --unused-for DAYS and --max-size SIZE\n"
                 "Run 'tensoracle cache prune --help' for usage.\n";
    return kExitUsage;
  }
  try {
    if (!options.unused_for.empty()) {
      criteria.mode = PruneCriteria::Mode::kUnusedFor;
      criteria.unused_for_days = parse_prune_days(options.unused_for);
    } else {
      criteria.mode = PruneCriteria::Mode::kMaxSize;
      criteria.max_size_bytes = parse_prune_size(options.max_size);
    }
  } catch (const InvalidArgumentError& e) {
    std::cerr << "tensoracle: cache prune: " << e.what() << "\nRun 'tensoracle cache prune --help' for usage.\n";
    return kExitUsage;
  }
  criteria.now_ns = now_ns();
  const PrunePlan plan = plan_prune(list_cache(directory_of(options)), criteria);
  std::cout << to_json(plan, options.dry_run) << std::endl;  // flushed: the plan is out before anything is removed
  if (std::getenv("TENSORACLE_TEST_PRUNE_PAUSE") != nullptr) {
    // Test hook (docs/cache.md): wait for a line on stdin between plan and removal, so a test can
    // change the directory at exactly that moment.
    std::string line;
    std::getline(std::cin, line);
  }
  const PruneResult result = execute_prune(plan, options.dry_run);
  std::cout << to_json(result) << "\n";
  return result.failed.empty() && result.size_limit_attainable ? kExitOk : kExitFailure;
}

void add_cache_dir_option(CLI::App* command, CacheOptions& options) {
  command
      ->add_option("--cache-dir", options.cache_dir,
                   "Use this directory instead of $XDG_CACHE_HOME/tensoracle (or ~/.cache/tensoracle)")
      ->type_name("DIR");
}

}  // namespace

void add_cache_command(CLI::App& app, Action& action) {
  CLI::App* group = app.add_subcommand("cache", "List and prune saved engines (docs/cache.md)");
  group->require_subcommand(1);
  auto options = std::make_shared<CacheOptions>();

  CLI::App* list = group->add_subcommand(
      "list",
      "Print, as one JSON object, every saved engine of the cache directory: file name, size, recorded time (the "
      "last save or successful open; UTC and exact nanoseconds), status, the header's build conditions, and the "
      "paths known for each weight digest.");
  add_cache_dir_option(list, *options);
  list->footer(
      "Only directory entries, file times, engine headers and weight digest records are read: never an engine's plan,\n"
      "a weight file or a GPU, and no file or time is changed. A recognized header does not prove the engine loads.\n"
      "Status: 'recognized'; 'building or leftover' for an empty file (a build in progress, or one that crashed);\n"
      "'unrecognized' with a reason for an unreadable or invalid header. An empty 'paths' list means unknown.\n"
      "Exit status: 0 success (a missing directory lists as empty); 1 the directory can't be read; 2 invalid usage.");
  list->callback([&action, options] { action = [options] { return run_list(*options); }; });

  CLI::App* prune = group->add_subcommand(
      "prune",
      "Remove saved engines that were not used recently (--unused-for DAYS) or the oldest ones until the cache fits "
      "a size (--max-size SIZE). Prints a JSON plan, then removes, then prints a JSON result.");
  add_cache_dir_option(prune, *options);
  auto* unused_for = prune->add_option("--unused-for", options->unused_for,
                                       "Remove engines whose recorded time (last save or successful open) is strictly "
                                       "earlier than now minus DAYS days of 24 hours; DAYS is a finite non-negative "
                                       "number and may be fractional (0.5 = 12 hours)");
  unused_for->type_name("DAYS");
  auto* max_size = prune->add_option("--max-size", options->max_size,
                                     "Remove the oldest engines (ties by file name) until the total size of the "
                                     "*.engine files is at most SIZE: bytes, or a number with B, KiB, MiB, GiB or TiB "
                                     "(any letter case, powers of 1024; 1.5GiB allowed, rounded down to whole bytes)");
  max_size->type_name("SIZE");
  unused_for->excludes(max_size);
  max_size->excludes(unused_for);
  prune->add_flag("--dry-run", options->dry_run,
                  "Print the plan and the projected result without removing anything or changing any time");
  prune->footer(
      "Exactly one of --unused-for and --max-size is required. Empty files ('building or leftover') and unrecognized\n"
      "files count toward the total but are never removed; weight digest records are kept. Removed engines are\n"
      "rebuilt the next time they are used. A file that disappears before removal is reported as missing; one that\n"
      "changed since the plan is left in place and reported as failed with a reason.\n"
      "Run it during maintenance, when no engine is being built or opened in the same directory: there is no lock.\n"
      "Check the selection with --dry-run first.\n"
      "Exit status: 0 success; 1 a filesystem failure, a failed removal, or a size limit that can't be reached\n"
      "(also with --dry-run); 2 invalid usage.");
  prune->callback([&action, options] { action = [options] { return run_prune(*options); }; });
}

}  // namespace tensoracle::cli
