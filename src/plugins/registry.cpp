// The process's plugin registry: loads plugin libraries with dlopen, checks their ABI and creators, keeps them.
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <deque>
#include <map>
#include <mutex>
#include <system_error>
#include <utility>

#include "plugins/registry.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/sha256.hpp"

namespace tensoracle {

namespace {

struct LoadedLibrary {
  std::filesystem::path path;
  std::string sha256;
  std::vector<LoadedPlugin> plugins;
};

struct Registry {
  std::mutex mutex;
  std::deque<plugins::RegisteredPlugin> plugins;  // stable addresses
  std::map<std::pair<std::string, std::string>, const plugins::RegisteredPlugin*> by_type;
  std::map<std::filesystem::path, LoadedLibrary> libraries;  // by canonical path
};

Registry& registry() {
  static Registry* instance = new Registry();  // never destroyed: creators must outlive every engine
  return *instance;
}

}  // namespace

std::vector<LoadedPlugin> load_plugin_library(const std::filesystem::path& library) {
  std::error_code ec;
  const std::filesystem::path path = std::filesystem::canonical(library, ec);
  if (ec || !std::filesystem::is_regular_file(path)) {
    throw IoError(fmt::format("plugin library {}: no such file", library.string()));
  }
  const std::string digest = sha256_file_hex(path);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (auto it = r.libraries.find(path); it != r.libraries.end()) {
    if (it->second.sha256 != digest) {
      throw InvalidArgumentError(fmt::format(
          "plugin library {}: the file changed since this process loaded it (SHA-256 {} then, {} now); a process keeps "
          "the first version it loads: start a new process to use the new one",
          path.string(), it->second.sha256, digest));
    }
    return it->second.plugins;
  }
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* message = ::dlerror();
    throw InvalidArgumentError(fmt::format("plugin library {}: can't be loaded: {}", path.string(),
                                           message != nullptr ? message : "unknown dlopen error"));
  }
  // From here on the handle is kept even on errors: creators of a half-registered library may not be unloaded safely,
  // and dlclose of a library with static state is rarely worth the risk.
  auto entry = reinterpret_cast<tensoracle_get_plugin_creators_fn>(::dlsym(handle, TENSORACLE_PLUGIN_ENTRY_NAME));
  if (entry == nullptr) {
    throw InvalidArgumentError(
        fmt::format("plugin library {}: exports no {} entry point; a plugin library defines it with "
                    "extern \"C\" TENSORACLE_PLUGIN_EXPORT (include/tensoracle/plugin.hpp, docs/plugins.md)",
                    path.string(), TENSORACLE_PLUGIN_ENTRY_NAME));
  }
  std::int32_t abi = -1;
  plugin::PluginCreator* const* creators = nullptr;
  std::int32_t count = 0;
  const std::int32_t status = entry(&abi, &creators, &count);
  if (abi != plugin::kAbiVersion) {
    throw InvalidArgumentError(
        fmt::format("plugin library {}: built for plugin ABI version {}, this tensoracle has version {}; rebuild the "
                    "library against this tensoracle's include/tensoracle/plugin.hpp",
                    path.string(), abi, plugin::kAbiVersion));
  }
  if (status != 0) {
    throw InvalidArgumentError(
        fmt::format("plugin library {}: its entry point failed (returned {})", path.string(), status));
  }
  if (creators == nullptr || count <= 0 || count > 4096) {
    throw InvalidArgumentError(fmt::format("plugin library {}: returned no creators ({})", path.string(), count));
  }
  LoadedLibrary loaded{path, digest, {}};
  std::vector<std::pair<std::string, std::string>> keys;
  for (std::int32_t i = 0; i < count; ++i) {
    const plugin::PluginCreator* creator = creators[i];
    if (creator == nullptr || creator->type() == nullptr || creator->version() == nullptr ||
        !plugins::valid_plugin_name(creator->type()) || !plugins::valid_plugin_name(creator->version())) {
      throw InvalidArgumentError(
          fmt::format("plugin library {}: creator {} has no valid type and version (names of letters, digits, '_', "
                      "'.' and '-', at most 128 characters)",
                      path.string(), i));
    }
    std::pair<std::string, std::string> key{creator->type(), creator->version()};
    if (auto it = r.by_type.find(key); it != r.by_type.end()) {
      throw InvalidArgumentError(fmt::format(
          "plugin library {}: plugin '{}' version '{}' is already provided by {}; load one library per plugin type "
          "and version",
          path.string(), key.first, key.second, it->second->info.library.string()));
    }
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) {
      throw InvalidArgumentError(fmt::format("plugin library {}: provides plugin '{}' version '{}' twice",
                                             path.string(), key.first, key.second));
    }
    keys.push_back(key);
    loaded.plugins.push_back(LoadedPlugin{key.first, key.second, path, digest});
  }
  for (std::int32_t i = 0; i < count; ++i) {
    r.plugins.push_back(plugins::RegisteredPlugin{creators[i], loaded.plugins[static_cast<std::size_t>(i)]});
    r.by_type.emplace(keys[static_cast<std::size_t>(i)], &r.plugins.back());
  }
  std::vector<LoadedPlugin> result = loaded.plugins;
  r.libraries.emplace(path, std::move(loaded));
  return result;
}

std::vector<LoadedPlugin> loaded_plugins() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<LoadedPlugin> all;
  for (const auto& [key, plugin] : r.by_type) all.push_back(plugin->info);
  return all;
}

namespace plugins {

bool valid_plugin_name(std::string_view name) {
  return !name.empty() && name.size() <= 128 && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '.' || c == '-';
  });
}

const RegisteredPlugin* find_plugin(const std::string& type, const std::string& version) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.by_type.find({type, version});
  return it == r.by_type.end() ? nullptr : it->second;
}

std::string loaded_plugins_summary() {
  std::vector<std::string> names;
  for (const auto& p : loaded_plugins()) names.push_back(fmt::format("'{}' version '{}'", p.type, p.version));
  return names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace plugins

}  // namespace tensoracle
