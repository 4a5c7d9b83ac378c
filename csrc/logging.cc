#include "logging.h"

#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "params.h"

namespace accl {
namespace {

struct Config {
  acclLogLevel_t level = acclLogWarn;
  std::string subsys;  // upper case, comma separated; "ALL" enables every subsystem
  char host[64] = "";
};

// Read once: logging sits on paths where re-reading the environment would cost.
const Config& config() {
  static const Config cfg = [] {
    Config c;
    std::string lvl = paramString(Param::Debug);
    if (!strcasecmp(lvl.c_str(), "NONE")) c.level = acclLogNone;
    else if (!strcasecmp(lvl.c_str(), "INFO")) c.level = acclLogInfo;
    else if (!strcasecmp(lvl.c_str(), "TRACE")) c.level = acclLogTrace;
    c.subsys = paramString(Param::DebugSubsys);
    for (char& ch : c.subsys) ch = toupper(ch);
    gethostname(c.host, sizeof(c.host) - 1);
    return c;
  }();
  return cfg;
}

}  // namespace

bool logEnabled(acclLogLevel_t level, const char* subsys) {
  const Config& c = config();
  if (level == acclLogNone || level > c.level) return false;
  if (c.subsys == "ALL" || !subsys) return true;
  std::string want = "," + c.subsys + ",";
  return want.find("," + std::string(subsys) + ",") != std::string::npos;
}

void log(acclLogLevel_t level, const char* subsys, const char* fmt, ...) {
  if (!logEnabled(level, subsys)) return;
  static const char* names[] = {"", "WARN", "INFO", "TRACE"};
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  // One fprintf per line, so lines of concurrent threads do not interleave.
  fprintf(stderr, "%s:%d:%ld ACCL %s %s: %s\n", config().host, getpid(), (long)syscall(SYS_gettid),
          names[level], subsys ? subsys : "", msg);
}

}  // namespace accl
