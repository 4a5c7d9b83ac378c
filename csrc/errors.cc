#include "errors.h"

#include <cstdarg>
#include <cstdio>

namespace accl {

std::string format(const char* fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string s(n > 0 ? n : 0, '\0');
  if (n > 0) vsnprintf(&s[0], n + 1, fmt, ap2);
  va_end(ap2);
  return s;
}

namespace {
thread_local std::string tlsLastError;
}

void setLastError(const std::string& msg) { tlsLastError = msg; }
const char* lastError() { return tlsLastError.c_str(); }

}  // namespace accl
