// Errors inside accl: code throws accl::Error; csrc/api.cc turns it into an acclResult_t and the
// thread's last-error message. Backends report through the ABI instead (backend.h).
#pragma once

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include "accl/accl.h"

namespace accl {

class Error : public std::runtime_error {
 public:
  Error(acclResult_t code, std::string msg) : std::runtime_error(std::move(msg)), code_(code) {}
  acclResult_t code() const { return code_; }

 private:
  acclResult_t code_;
};

// printf-style formatting into a std::string.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// The calling thread's last-error message (acclGetLastError).
void setLastError(const std::string& msg);
const char* lastError();

}  // namespace accl

#define ACCL_THROW(code, ...) throw ::accl::Error((code), ::accl::format(__VA_ARGS__))

// Rejects bad input with acclInvalidArgument and a message that says what was wrong.
#define ACCL_ARG_CHECK(cond, ...)                                   \
  do {                                                              \
    if (!(cond)) ACCL_THROW(acclInvalidArgument, __VA_ARGS__);      \
  } while (0)

// Internal invariants: both values go into the message.
#define ACCL_ENFORCE_EQ(a, b)                                                              \
  do {                                                                                     \
    auto accl_a_ = (a);                                                                    \
    auto accl_b_ = (b);                                                                    \
    if (!(accl_a_ == accl_b_))                                                             \
      ACCL_THROW(acclInternalError, "%s:%d: expected %s == %s, got %lld vs %lld", __FILE__, \
                 __LINE__, #a, #b, (long long)accl_a_, (long long)accl_b_);                \
  } while (0)

// A failed system call: the message names the call, errno's text and a likely fix.
#define ACCL_SYSCHECK(expr, what, hint)                                                  \
  do {                                                                                   \
    if ((expr) < 0) {                                                                    \
      int accl_errno_ = errno;                                                           \
      ACCL_THROW(acclSystemError, "%s failed: %s%s%s", std::string(what).c_str(),          \
                 strerror(accl_errno_),                                                  \
                 std::string(hint).empty() ? "" : " (",                                  \
                 std::string(hint).empty() ? "" : (std::string(hint) + ")").c_str());    \
    }                                                                                    \
  } while (0)
