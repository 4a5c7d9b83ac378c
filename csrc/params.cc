#include "params.h"

#include <cstdlib>

#include "errors.h"

namespace accl {
namespace {

struct Entry {
  const char* name;
  const char* def;
};

const Entry kEntries[] = {
#define ACCL_PARAM_ENTRY(id, name, def, doc) {name, def},
    ACCL_PARAMS(ACCL_PARAM_ENTRY)
#undef ACCL_PARAM_ENTRY
};

}  // namespace

std::string paramString(Param p) {
  const Entry& e = kEntries[static_cast<int>(p)];
  const char* v = getenv(e.name);
  return (v && *v) ? v : e.def;
}

long long paramInt(Param p) {
  std::string s = paramString(p);
  char* end = nullptr;
  long long v = strtoll(s.c_str(), &end, 0);
  if (s.empty() || *end)
    ACCL_THROW(acclInvalidArgument, "%s=%s is not an integer", kEntries[static_cast<int>(p)].name,
               s.c_str());
  return v;
}

double paramDouble(Param p) {
  std::string s = paramString(p);
  char* end = nullptr;
  double v = strtod(s.c_str(), &end);
  if (s.empty() || *end)
    ACCL_THROW(acclInvalidArgument, "%s=%s is not a number", kEntries[static_cast<int>(p)].name,
               s.c_str());
  return v;
}

}  // namespace accl
