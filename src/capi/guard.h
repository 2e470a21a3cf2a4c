// Every C entry point wraps its body in DP_GUARD_BEGIN / DP_GUARD_END: any
// exception becomes a dp_status and the thread-local message, so none crosses
// the ABI. tests/check_guards.py checks that every dp_status entry has both.
#pragma once
#include <cstring>
#include <new>
#include <type_traits>

#include "core/error.h"

namespace dp {
dp_status set_error(dp_status status, const char* message);

// The int a C caller passed for an enum parameter. C lets any int through;
// C++ may not even read a value that is none of the enumerators as the enum
// type (clang's -fsanitize=enum stops there), so its bits are copied.
template <class E>
int c_enum(const E& e) {
  static_assert(std::is_enum<E>::value && sizeof(E) == sizeof(int), "a C enum parameter");
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}
}  // namespace dp

#define DP_GUARD_BEGIN try {
#define DP_GUARD_END                                                        \
  }                                                                         \
  catch (const dp::Error& e) {                                              \
    return dp::set_error(e.status(), e.what());                             \
  }                                                                         \
  catch (const std::bad_alloc&) {                                           \
    return dp::set_error(DP_ERR_OUT_OF_MEMORY, "out of memory");            \
  }                                                                         \
  catch (const std::exception& e) {                                         \
    return dp::set_error(DP_ERR_INTERNAL, e.what());                        \
  }                                                                         \
  catch (...) {                                                             \
    return dp::set_error(DP_ERR_INTERNAL, "unknown exception");             \
  }                                                                         \
  return DP_OK;

// Argument checks inside a guarded body.
#define DP_CHECK_ARG(cond, msg) \
  if (!(cond)) dp::fail(DP_ERR_INVALID_ARGUMENT, std::string(__func__) + ": " + (msg))
