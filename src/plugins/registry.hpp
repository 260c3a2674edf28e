// The library's side of the plugin registry: finding a loaded plugin's creator by type and version.
#pragma once

#include <string>
#include <string_view>

#include "tensoracle/plugin.hpp"
#include "tensoracle/plugin_registry.hpp"

namespace tensoracle::plugins {

struct RegisteredPlugin {
  const plugin::PluginCreator* creator = nullptr;
  LoadedPlugin info;
};

// The names of plugin types, versions and fields: 1 to 128 letters, digits, '_', '.' and '-'.
bool valid_plugin_name(std::string_view name);

// The loaded plugin of that type and version; nullptr when none is. The record lives as long as the process.
const RegisteredPlugin* find_plugin(const std::string& type, const std::string& version);

// "a, b v2" (or "none"): the plugins loaded now, for messages.
std::string loaded_plugins_summary();

}  // namespace tensoracle::plugins
