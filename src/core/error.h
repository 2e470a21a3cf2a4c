// Errors inside the runtime are C++ exceptions carrying a dp_status; the C ABI
// (src/capi) turns them into a status and the thread-local message. Nothing
// else in the runtime deals with the C error convention.
#pragma once
#include <stdexcept>
#include <string>

#include "dp.h"

namespace dp {

class Error : public std::runtime_error {
 public:
  Error(dp_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  dp_status status() const { return status_; }

 private:
  dp_status status_;
};

[[noreturn]] inline void fail(dp_status status, const std::string& message) {
  throw Error(status, message);
}

}  // namespace dp
