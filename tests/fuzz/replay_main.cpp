// Runs a fuzz target over saved inputs, without libFuzzer: every regular file
// named on the command line, or inside a directory named there (sorted;
// names starting with '.' skipped). Ordinary builds link the targets with
// this, so the seed corpora and the crash inputs kept in tests/fuzz/regressions
// replay in `meson test --suite fuzz` (and under the sanitizers in CI).
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);
// LeakSanitizer's, when the build has it (as libFuzzer, a leak check after
// every input).
extern "C" __attribute__((weak)) int __lsan_do_recoverable_leak_check();

static bool is_dir(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

static void collect(const std::string& path, std::vector<std::string>& out) {
  if (!is_dir(path)) {
    out.push_back(path);
    return;
  }
  DIR* d = opendir(path.c_str());
  if (!d) {
    std::fprintf(stderr, "cannot open directory %s\n", path.c_str());
    std::exit(2);
  }
  std::vector<std::string> names;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') names.push_back(e->d_name);
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto& n : names) collect(path + "/" + n, out);
}

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) collect(argv[i], files);
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", f.c_str());
      return 2;
    }
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "%s (%zu bytes)\n", f.c_str(), bytes.size());
    // An exact-size heap copy: a read past the end is caught by ASan.
    std::vector<uint8_t> exact(bytes.begin(), bytes.end());
    LLVMFuzzerTestOneInput(exact.empty() ? nullptr : exact.data(), exact.size());
    if (__lsan_do_recoverable_leak_check && __lsan_do_recoverable_leak_check()) {
      std::fprintf(stderr, "%s leaked\n", f.c_str());
      return 1;
    }
  }
  std::fprintf(stderr, "replayed %zu inputs\n", files.size());
  return 0;
}
