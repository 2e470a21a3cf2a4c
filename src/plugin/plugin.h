// Layer plugins (include/dp_plugin.h, docs/plugins.md): shared libraries
// loaded with dlopen(RTLD_NOW | RTLD_LOCAL) that register layer types into a
// context's registry through the host's function table. A plugin's type
// becomes a dp::Layer (PluginLayer, plugin.cpp), so a model, a group, the
// optimizers, checkpoints and the gradient checker treat it as a built-in.
//
// Lifetime: the library stays open while anything refers to it: the context
// (Plugins), the registry's factories, and every layer built from its types;
// dlclose runs when the last of these goes. A library that gave CUDA code
// (dp_plugin_device_impls) is never unloaded: the CUDA runtime keeps its
// kernels registered until the process ends.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "layers/registry.h"

namespace dp {

struct PluginLib;

class Plugins {
 public:
  struct Info {
    std::string path;   // canonical path of the library
    std::string types;  // "swish@1,rms_norm@1": the types it registered, with versions
  };

  // Loads the plugin named by entry and registers its types into registry,
  // all or nothing. entry with a '/' is a path, relative to base_dir ("" =
  // the current directory); a bare name is searched in DP_PLUGIN_PATH
  // (colon-separated directories; as given, then <name>.so, then
  // lib<name>.so), then in installed_plugin_dir(), then in base_dir. Loading a library already loaded is a
  // no-op. Throws DP_ERR_PLUGIN (and registers nothing) when the file is
  // missing or not loadable, lacks dp_plugin_init, asks for a host API
  // version this host lacks, registers a type name already known, or its
  // init fails.
  //
  // Trust: kAny for the program's own calls; kInstalledOnly for a model's
  // "plugins" list (a model file is data): a bare name is searched in
  // DP_PLUGIN_PATH and installed_plugin_dir() only, and a path loads nothing new (a library already
  // loaded is still a no-op) unless the program allowed it (kAny).
  enum class Trust { kAny, kInstalledOnly };
  void load(Registry& registry, const std::string& entry, const std::string& base_dir, Trust trust = Trust::kAny);

  const std::vector<Info>& info() const { return info_; }

 private:
  std::vector<std::shared_ptr<PluginLib>> libs_;
  std::vector<Info> info_;
  std::map<std::string, std::string> origin_;  // plugin type -> library path
};

// The plugins installed with this library: <folder of libdp.so>/dp/plugins,
// which is pkg-config's plugindir once dp is installed, found as the library
// loads; "" when dp is not a shared libdp.so* (linked into a program) or its
// path is unknown. In a build tree it names a folder that does not exist.
std::string installed_plugin_dir();

// Where load() would look for entry: the file it finds, or "" (with the
// places tried in *tried). search_base: a bare name is also looked for in
// base_dir, after DP_PLUGIN_PATH and installed_plugin_dir().
std::string resolve_plugin_path(const std::string& entry, const std::string& base_dir, std::string* tried,
                                bool search_base = true);

}  // namespace dp
