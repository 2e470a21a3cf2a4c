// Fuzz target: the args_* accessors of the host table a plugin gets
// (include/dp_plugin.h, plugin/plugin.cpp), called as a plugin's create
// calls them, on a fuzzed JSON object. The plugin is tests/fuzz/fuzz_plugin.c
// ("fuzz_args"): its create runs the call sequence decoded here.
// Input: two bytes (little-endian) of JSON length, the JSON object, one byte
// of flags (bit 0: return 0 from create even after a failed call; bit 1:
// stop at the first failure), then calls: each one byte of op (bits 0-2:
// json, path, has, int, float, bool, string, return; bit 3: NULL key;
// bit 4: NULL out; bit 5: a literal key, else one of the object's keys;
// bit 6: NULL args) and its arguments.
#include <dlfcn.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dp_plugin.h"
#include "fuzz_util.h"
#include "plugin/plugin.h"

using nlohmann::json;

namespace {

using CreateFn = int (*)(void* ctx, const dp_host_api* api, dp_plugin_args* args, char* err, size_t cap);
using SetCreateFn = void (*)(CreateFn, void*);

struct Program {
  dp::fuzz::Cursor* in;
  const json* obj;
  std::vector<std::string> keys;  // the object's, and a few others
};

std::string literal(dp::fuzz::Cursor& in) { return in.str(in.u8() % 24); }

int run_program(void* ctx, const dp_host_api* api, dp_plugin_args* args, char* err, size_t cap) {
  Program& p = *static_cast<Program*>(ctx);
  dp::fuzz::Cursor& in = *p.in;
  const uint8_t flags = in.u8();
  std::vector<const char*> strings;  // args_string results: valid until create returns
  std::deque<std::string> keep;  // the keys and defaults passed: stable addresses
  bool failed = false;
  for (int call = 0; call < 64 && in.left() > 0; ++call) {
    const uint8_t op = in.u8();
    dp_plugin_args* a = (op & 0x40) ? nullptr : args;
    keep.push_back((op & 0x20) || p.keys.empty() ? literal(in) : p.keys[in.u8() % p.keys.size()]);
    const char* key = (op & 0x08) ? nullptr : keep.back().c_str();
    const bool present = a && key && p.obj->contains(std::string(key));
    int rc = 0;
    switch (op & 7) {
      case 0: {
        const char* s = api->args_json(a);
        DP_FUZZ_CHECK(s);
        if (a) DP_FUZZ_CHECK(json::parse(s) == *p.obj);
        break;
      }
      case 1: {
        const char* s = api->args_path(a);
        DP_FUZZ_CHECK(s);
        if (a) DP_FUZZ_CHECK(std::string(s) == "/layers/0");
        break;
      }
      case 2:
        DP_FUZZ_CHECK(api->args_has(a, key) == (present ? 1 : 0));
        break;
      case 3: {
        const int64_t def = static_cast<int64_t>(in.u64()), min = static_cast<int64_t>(in.u64());
        int64_t out = 0;
        rc = api->args_int(a, key, def, min, (op & 0x10) ? nullptr : &out);
        if (rc == 0 && !(op & 0x10)) DP_FUZZ_CHECK(present ? out >= min : out == def);
        break;
      }
      case 4: {
        const double def = in.f64(), lo = in.f64(), hi = in.f64();
        double out = 0;
        rc = api->args_float(a, key, def, lo, hi, (op & 0x10) ? nullptr : &out);
        if (rc == 0 && !(op & 0x10) && present) DP_FUZZ_CHECK(out >= lo && out <= hi);
        break;
      }
      case 5: {
        const int def = in.u8() % 3;
        int out = -1;
        rc = api->args_bool(a, key, def, (op & 0x10) ? nullptr : &out);
        if (rc == 0 && !(op & 0x10)) DP_FUZZ_CHECK(present ? (out == 0 || out == 1) : out == (def != 0));
        break;
      }
      case 6: {
        keep.push_back(literal(in));
        const char* def = (in.u8() & 1) ? nullptr : keep.back().c_str();
        const char* out = nullptr;
        rc = api->args_string(a, key, def, (op & 0x10) ? nullptr : &out);
        if (rc == 0 && !(op & 0x10)) {
          DP_FUZZ_CHECK(out);
          strings.push_back(out);
        }
        break;
      }
      default:
        std::snprintf(err, cap, "create refused");
        return in.u8() & 1;
    }
    if (rc) {
      failed = true;
      if (flags & 2) break;
    }
  }
  for (const char* s : strings) (void)std::strlen(s);  // still valid
  if (failed && !(flags & 1)) {
    std::snprintf(err, cap, "an argument is wrong");
    return 1;
  }
  return 0;
}

struct World {
  dp::Registry registry;
  dp::Plugins plugins;
  dp::LayerFactory factory;
  SetCreateFn set_create = nullptr;
  World() {
    plugins.load(registry, DP_FUZZ_PLUGIN, "");
    factory = registry.layer("fuzz_args");
    void* h = dlopen(DP_FUZZ_PLUGIN, RTLD_NOW | RTLD_NOLOAD);
    if (!h || !factory) dp::fuzz::MemFile::abort_with("the fuzz plugin did not load");
    set_create = reinterpret_cast<SetCreateFn>(dlsym(h, "dp_fuzz_set_create"));
    if (!set_create) dp::fuzz::MemFile::abort_with("the fuzz plugin lacks dp_fuzz_set_create");
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World w;
  dp::fuzz::Cursor in(data, size);
  const std::string text = in.str(in.u16());
  json obj;
  try {
    obj = json::parse(text);
  } catch (const json::exception&) {
    return 0;
  }
  Program p{&in, &obj, {}};
  if (obj.is_object())
    for (auto it = obj.begin(); it != obj.end() && p.keys.size() < 16; ++it) p.keys.push_back(it.key());
  w.set_create(run_program, &p);
  try {
    dp::Args args(obj, "/layers/0");
    args.accept("type");
    auto layer = w.factory(args);
    args.finish("fuzz_args");
  } catch (const dp::Error& e) {
    dp::fuzz::expected(e);
  }
  w.set_create(nullptr, nullptr);
  return 0;
}
