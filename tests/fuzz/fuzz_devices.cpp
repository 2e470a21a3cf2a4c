// Fuzz target: device strings ("cpu:0,cpu:1", "cuda:0", "auto"): the dp
// command's resolution of "auto" (src/cli/util.cpp, resolve_devices), then a
// group made on the result (Group's parser, group/group.cpp) for a tiny model.
// Input: one byte of local processes (0-3), one of local rank (0-3), then
// the device string. Strings naming more than 8 devices are skipped (each
// device is a thread).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "cli.h"
#include "fuzz_util.h"
#include "group/group.h"
#include "model/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static dp::Registry registry;
  static std::unique_ptr<dp::Model> model =
      dp::Model::from_json(registry, R"({"input": {"shape": [4]}, "layers": [{"type": "linear", "out_features": 2}]})");
  dp::fuzz::Cursor in(data, size);
  const int local_processes = in.u8() % 4, local_rank = in.u8() % 4;
  std::string spec = in.rest_str();
  std::string devices;
  try {
    devices = dpcli::resolve_devices(spec, local_processes, local_rank);
  } catch (const dpcli::Failure&) {
    return 0;
  }
  if (std::count(devices.begin(), devices.end(), ',') >= 8) return 0;
  try {
    dp::Group group(*model, devices);
    DP_FUZZ_CHECK(group.size() >= 1 && group.size() <= 8);
  } catch (const dp::Error& e) {
    dp::fuzz::expected(e);
  }
  return 0;
}
