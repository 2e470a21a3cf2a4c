#include "core/memory.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace dp {

int64_t checked_mul(int64_t a, int64_t b, const std::string& what) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r))
    fail(DP_ERR_SHAPE, what + ": " + std::to_string(a) + " x " + std::to_string(b) + " is too large (over 2^63)");
  return r;
}

int64_t checked_add(int64_t a, int64_t b, const std::string& what) {
  int64_t r = 0;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r))
    fail(DP_ERR_SHAPE, what + ": " + std::to_string(a) + " + " + std::to_string(b) + " is too large (over 2^63)");
  return r;
}

uint64_t available_memory() {
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kb = 0;
    bool found = false;
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
        found = true;
        break;
      }
    std::fclose(f);
    if (found) return static_cast<uint64_t>(kb) * 1024;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  if (pages > 0 && size > 0) return static_cast<uint64_t>(pages) * static_cast<uint64_t>(size);
  return std::numeric_limits<uint64_t>::max() / 4;
}

uint64_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  if (pages > 0 && size > 0) return static_cast<uint64_t>(pages) * static_cast<uint64_t>(size);
  return std::numeric_limits<uint64_t>::max() / 4;
}

std::string format_bytes(double bytes) {
  static const char* units[] = {"bytes", "kB", "MB", "GB", "TB", "PB", "EB"};
  int u = 0;
  while (bytes >= 1000 && u < 6) {
    bytes /= 1000;
    ++u;
  }
  char s[32];
  if (u == 0)
    std::snprintf(s, sizeof s, "%.0f bytes", bytes);
  else
    std::snprintf(s, sizeof s, "%.1f %s", bytes, units[u]);
  return s;
}

void check_fits(uint64_t held, uint64_t bytes, uint64_t limit, const std::string& what) {
  const bool machine = limit == 0;
  const uint64_t avail = machine ? available_memory() : 0;
  const uint64_t cap = machine ? avail + held : limit;
  if (bytes <= cap && held <= cap - bytes) return;
  std::string where = machine ? "the machine's available memory (" + format_bytes(double(avail)) + ")"
                              : "the memory limit of " + format_bytes(double(limit)) + " (DP_CONTEXT_MEMORY_LIMIT)";
  fail(DP_ERR_OUT_OF_MEMORY, what + " needs " + format_bytes(double(bytes)) +
                                 (held ? " more, beside the " + format_bytes(double(held)) + " the model already holds," : "") +
                                 " above " + where + "; nothing was allocated");
}

}  // namespace dp
