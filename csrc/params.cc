#include "params.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>

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

constexpr int kTuningFile = static_cast<int>(Param::TuningFile);

// The path of the tuning file in effect, or "" for none. Read from the environment only: the
// file cannot name itself.
std::string tuningPath() {
  const char* v = getenv(kEntries[kTuningFile].name);
  if (v && *v) return strcmp(v, "none") == 0 ? "" : v;
  const char* xdg = getenv("XDG_CONFIG_HOME");
  const char* home = getenv("HOME");
  std::string dir = xdg && *xdg ? xdg : home && *home ? std::string(home) + "/.config" : "";
  if (dir.empty()) return "";
  std::string path = dir + "/accl/tuning.conf";
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? path : "";  // the default file is optional
}

struct Tuning {
  std::map<std::string, std::string> values;
  std::string error;  // why the file is ignored, "" when it is not
};

// Parses the file once per path: lines NAME=VALUE, blank lines and whole-line # comments.
const Tuning& tuning(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, Tuning> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(path);
  if (it != cache.end()) return it->second;
  Tuning& t = cache[path];
  std::ifstream f(path);
  struct stat st;
  if (!f || stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    t.error = format("cannot read the tuning file %s: %s", path.c_str(),
                     f ? "not a regular file" : strerror(errno));
    return t;
  }
  std::string line;
  for (int n = 1; std::getline(f, line); ++n) {
    if (n == 1 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);  // a UTF-8 BOM
    size_t a = line.find_first_not_of(" \t\r");
    if (a == std::string::npos || line[a] == '#') continue;
    size_t b = line.find_last_not_of(" \t\r"), eq = line.find('=', a);
    std::string name = eq == std::string::npos ? "" : line.substr(a, eq - a);
    name.erase(name.find_last_not_of(" \t") + 1);
    bool known = false;
    for (int i = 0; i < int(sizeof(kEntries) / sizeof(kEntries[0])); ++i)
      known |= i != kTuningFile && name == kEntries[i].name;
    const char* why = !known ? "is not NAME=VALUE for a variable of docs/environment.md's first "
                               "table (other than ACCL_TUNING_FILE)"
                      : t.values.count(name) ? "sets a variable an earlier line set" : nullptr;
    if (why) {
      t.values.clear();
      t.error = format("tuning file %s, line %d: '%s' %s", path.c_str(), n,
                       line.substr(a, b - a + 1).c_str(), why);
      return t;
    }
    size_t v = line.find_first_not_of(" \t", eq + 1);
    t.values[name] = v > b ? "" : line.substr(v, b - v + 1);
  }
  return t;
}

}  // namespace

std::string paramString(Param p) {
  const Entry& e = kEntries[static_cast<int>(p)];
  const char* v = getenv(e.name);
  if (v && *v) return v;
  std::string path = tuningPath();
  if (!path.empty()) {
    const Tuning& t = tuning(path);
    auto it = t.values.find(e.name);
    if (it != t.values.end() && !it->second.empty()) return it->second;
  }
  return e.def;
}

const char* paramName(Param p) { return kEntries[static_cast<int>(p)].name; }

std::string checkTuningFile() {
  std::string path = tuningPath();
  const std::string& error = path.empty() ? path : tuning(path).error;
  if (!error.empty()) ACCL_THROW(acclInvalidArgument, "%s", error.c_str());
  return path;
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
