// Logging to stderr by level (ACCL_DEBUG) and subsystem (ACCL_DEBUG_SUBSYS). Never stdout.
#pragma once

#include "accl/backend.h"

namespace accl {

// The acclLogger_t handed to backends, and the core's own entry point.
void log(acclLogLevel_t level, const char* subsys, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
bool logEnabled(acclLogLevel_t level, const char* subsys);

}  // namespace accl

#define ACCL_WARN(subsys, ...) ::accl::log(acclLogWarn, subsys, __VA_ARGS__)
#define ACCL_INFO(subsys, ...) ::accl::log(acclLogInfo, subsys, __VA_ARGS__)
#define ACCL_TRACE(subsys, ...) ::accl::log(acclLogTrace, subsys, __VA_ARGS__)
