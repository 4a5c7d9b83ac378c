// Finds and opens the vendor library, resolves its symbols and reads its version.
#include <dlfcn.h>
#include <glob.h>
#include <link.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <vector>

#include "nccl_api.h"

#ifndef ACCL_NCCL_FLAVOR
#error "ACCL_NCCL_FLAVOR must name the flavor this plugin is built for: nccl, rccl or pccl"
#endif

namespace accl {
namespace nccl {
namespace {

constexpr Flavor kFlavors[] = {
    {"nccl", "nccl", "ACCL_NCCL_LIBRARY", {"libnccl.so.2", "libnccl.so", nullptr},
     "nvidia/nccl/lib", "pip install nvidia-nccl-cu12 (or -cu13, matching your CUDA)", "CUDA",
     nullptr, nullptr, true},
    // RCCL exports NCCL's symbols and follows NCCL's version numbers.
    {"rccl", "nccl", "ACCL_RCCL_LIBRARY", {"librccl.so", "librccl.so.1", nullptr}, nullptr,
     "install ROCm's rccl package", "ROCm", "ROCM_PATH", "/opt/rocm", true},
    // pccl has NCCL's API under a pccl prefix; its version numbers are its own.
    {"pccl", "pccl", "ACCL_PCCL_LIBRARY", {"libpccl.so", nullptr, nullptr}, nullptr,
     "install the PPU SDK's pccl", "PPU", nullptr, nullptr, false},
};

constexpr bool same(const char* a, const char* b) {
  return *a == *b && (*a == '\0' || same(a + 1, b + 1));
}
constexpr int flavorIndex() {
  for (int i = 0; i < 3; ++i)
    if (same(kFlavors[i].name, ACCL_NCCL_FLAVOR)) return i;
  return -1;
}
static_assert(flavorIndex() >= 0, "ACCL_NCCL_FLAVOR must be \"nccl\", \"rccl\" or \"pccl\"");

// NCCL releases with a documented bug that affects accl's use of them: a warning at load time.
struct KnownBad {
  int from, fixedIn;  // affected: from <= version < fixedIn
  bool armOnly;
  const char* what;
};
constexpr KnownBad kKnownBad[] = {
    // NVIDIA/nccl issues #1944 and #1753: from 2.27.3, ncclGroupEndInternal allocates a group job
    // that is never freed when the group has no work (single-rank communicators), so each
    // collective leaks host memory. Fixed in v2.29.7-1 (src/group.cc, "Free when not needed").
    {version(2, 27, 3), version(2, 29, 7), false,
     "it leaks host memory at every collective on a 1-rank communicator (NVIDIA/nccl issues "
     "#1944, #1753)"},
    // NCCL 2.29.3 release notes: "Fixes CAS usage in case of weak failure which was causing a
    // hang on ARM". The faulty loop in ncclProxyGetPostedOps (src/proxy.cc) came with 2.28.9.
    {version(2, 28, 9), version(2, 29, 3), true,
     "it can hang silently on ARM hosts: the proxy loses free op slots after a spurious "
     "compare-and-swap failure (fixed per the NCCL 2.29.3 release notes)"},
};
#if defined(__aarch64__)
constexpr bool kArmHost = true;
#else
constexpr bool kArmHost = false;
#endif

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return buf;
}

std::string dirOf(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

void addGlob(const std::string& pattern, std::vector<std::string>* out) {
  glob_t g;
  if (glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out->push_back(g.gl_pathv[i]);
  globfree(&g);
}

// The site-packages directories of the Python environment this process runs in, found without
// asking Python: beside this plugin (a wheel installs it in site-packages/accl/), under
// VIRTUAL_ENV and CONDA_PREFIX, on PYTHONPATH, and those of the extension modules already loaded
// (numpy's, in any process that imported accl).
std::vector<std::string> sitePackages() {
  std::vector<std::string> dirs;
  Dl_info self;
  if (dladdr(reinterpret_cast<void*>(&sitePackages), &self) && self.dli_fname)
    dirs.push_back(dirOf(dirOf(self.dli_fname)));
  for (const char* env : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
    const char* prefix = getenv(env);
    if (prefix && *prefix) addGlob(std::string(prefix) + "/lib/python3*/site-packages", &dirs);
  }
  if (const char* pp = getenv("PYTHONPATH")) {
    std::string s = pp;
    for (size_t b = 0, e; b <= s.size(); b = e + 1) {
      e = s.find(':', b);
      if (e == std::string::npos) e = s.size();
      if (e > b) dirs.push_back(s.substr(b, e - b));
    }
  }
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        std::string name = info->dlpi_name ? info->dlpi_name : "";
        for (const char* marker : {"/site-packages/", "/dist-packages/"}) {
          size_t at = name.find(marker);
          if (at != std::string::npos)
            static_cast<std::vector<std::string>*>(data)->push_back(
                name.substr(0, at + strlen(marker) - 1));
        }
        return 0;
      },
      &dirs);
  return dirs;
}

struct Candidate {
  std::string spec;   // what dlopen is given
  std::string where;  // how it was found, for messages
};

// Where the library may be, in the order tried. An explicit override is the only candidate:
// if it is wrong, that is an error, not a reason to load some other copy.
std::vector<Candidate> candidates(const Flavor& f, std::string* lookedIn) {
  std::vector<Candidate> out;
  const char* override_ = getenv(f.envVar);
  if (override_ && *override_) return {{override_, f.envVar}};
  std::set<std::string> seen;
  auto add = [&](const std::string& spec, const std::string& where) {
    if (seen.insert(spec).second) out.push_back({spec, where});
  };
  // A copy that is already loaded (by torch, say) is the one to share: two copies of NCCL in
  // one process do not know about each other's communicators.
  for (const char* lib : f.libs) {
    if (!lib) break;
    if (void* h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD)) {
      dlclose(h);
      add(lib, "already loaded in this process");
    }
  }
  if (f.wheelDir) {
    for (const std::string& sp : sitePackages()) {
      std::string dir = sp + "/" + f.wheelDir;
      if (!seen.insert("dir:" + dir).second) continue;
      *lookedIn += "\n  " + dir + "/";
      for (const char* lib : f.libs)
        if (lib && exists(dir + "/" + lib)) add(dir + "/" + lib, "a pip wheel");
    }
  }
  if (f.homeEnv) {
    const char* home = getenv(f.homeEnv);
    std::string dir = std::string(home && *home ? home : f.homeDefault) + "/lib";
    *lookedIn += "\n  " + dir + "/";
    for (const char* lib : f.libs)
      if (lib && exists(dir + "/" + lib)) add(dir + "/" + lib, f.homeEnv);
  }
  for (const char* lib : f.libs)
    if (lib) add(lib, "the library search path");
  return out;
}

struct Symbol {
  const char* name;  // without the prefix
  void** slot;
  bool required;
  const char* without;  // what accl does when an optional one is absent
};

// Resolves every symbol; returns the mandatory ones that are missing (comma separated).
std::string resolve(void* h, const Flavor& f, Api* api, std::string* absent) {
#define ACCL_SYM(fn, req, without) {#fn, reinterpret_cast<void**>(&api->fn), req, without}
  const Symbol syms[] = {
      ACCL_SYM(GetVersion, true, ""),
      ACCL_SYM(GetErrorString, true, ""),
      ACCL_SYM(GetUniqueId, true, ""),
      ACCL_SYM(CommInitRank, true, ""),
      ACCL_SYM(CommDestroy, true, ""),
      ACCL_SYM(CommAbort, true, ""),
      ACCL_SYM(CommGetAsyncError, true, ""),
      ACCL_SYM(AllReduce, true, ""),
      ACCL_SYM(Broadcast, true, ""),
      ACCL_SYM(Reduce, true, ""),
      ACCL_SYM(AllGather, true, ""),
      ACCL_SYM(ReduceScatter, true, ""),
      ACCL_SYM(Send, true, ""),
      ACCL_SYM(Recv, true, ""),
      ACCL_SYM(GroupStart, true, ""),
      ACCL_SYM(GroupEnd, true, ""),
      ACCL_SYM(GetLastError, false, "errors carry only the generic error string"),
      ACCL_SYM(CommInitRankConfig, false,
               "communicators are blocking: init and group end are not bounded by the timeout"),
      ACCL_SYM(CommFinalize, false, "finalize does not wait for outstanding work"),
      ACCL_SYM(AlltoAll, false, "accl composes all-to-all from send/recv"),
      ACCL_SYM(Gather, false, "accl composes gather from send/recv"),
      ACCL_SYM(Scatter, false, "accl composes scatter from send/recv"),
  };
#undef ACCL_SYM
  std::string missing;
  for (const Symbol& s : syms) {
    std::string name = std::string(f.prefix) + s.name;
    *s.slot = dlsym(h, name.c_str());
    if (*s.slot) continue;
    if (s.required) missing += (missing.empty() ? "" : ", ") + name;
    else *absent += format("\n  %s: %s", name.c_str(), s.without);
  }
  return missing;
}

void decodeVersion(Library* lib) {
  int c = lib->versionCode;
  if (c >= 10000) {  // X*10000 + Y*100 + Z, from 2.9
    lib->major = c / 10000;
    lib->minor = c / 100 % 100;
  } else {  // X*1000 + Y*100 + Z, up to 2.8
    lib->major = c / 1000;
    lib->minor = c / 100 % 10;
  }
  lib->patch = c % 100;
  lib->versionString = format("%d.%d.%d", lib->major, lib->minor, lib->patch);
}

enum class Opened { kOk, kNotLoadable, kUnusable };

// Opens one candidate; on failure says why in *why.
Opened tryOpen(const Candidate& c, const Flavor& f, const acclBackendHost_v1* host, Library* lib,
               std::string* why) {
  void* h = dlopen(c.spec.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    *why = dlerror();
    return Opened::kNotLoadable;
  }
  std::string absent;
  std::string missing = resolve(h, f, &lib->api, &absent);
  Dl_info info;
  lib->path = lib->api.GetVersion && dladdr(reinterpret_cast<void*>(lib->api.GetVersion), &info) &&
                      info.dli_fname ? info.dli_fname : c.spec;
  if (!missing.empty()) {
    // Never dlclose a library that may have started threads; this one is not used further.
    *why = lib->path + " lacks " + missing + ": it is not a complete " + f.name +
           " library (symbols prefixed \"" + f.prefix + "\")";
    return Opened::kUnusable;
  }
  Result r = lib->api.GetVersion(&lib->versionCode);
  if (r != kSuccess) {
    *why = format("%s: %sGetVersion failed with code %d", lib->path.c_str(), f.prefix, (int)r);
    return Opened::kUnusable;
  }
  decodeVersion(lib);
  host->log(acclLogInfo, "INIT", "%s %s loaded from %s (found via %s)", f.name,
            lib->versionString.c_str(), lib->path.c_str(), c.where.c_str());
  if (!absent.empty())
    host->log(acclLogInfo, "INIT", "%s %s lacks these optional symbols:%s", f.name,
              lib->versionString.c_str(), absent.c_str());
  if (same(f.name, "nccl"))
    for (const KnownBad& b : kKnownBad)
      if (lib->code() >= b.from && lib->code() < b.fixedIn && (!b.armOnly || kArmHost))
        host->log(acclLogWarn, "INIT",
                  "NCCL %s (%s) is a known-bad version: %s. Upgrade NCCL to %d.%d.%d or later.",
                  lib->versionString.c_str(), lib->path.c_str(), b.what, b.fixedIn / 10000,
                  b.fixedIn / 100 % 100, b.fixedIn % 100);
  return Opened::kOk;
}

}  // namespace

const Flavor& flavor() { return kFlavors[flavorIndex()]; }

const Library* loadLibrary(const acclBackendHost_v1* host, std::string* why) {
  static std::mutex mu;
  static Library* loaded = nullptr;  // kept for the life of the process, as the library is
  std::lock_guard<std::mutex> lock(mu);
  if (loaded) return loaded;
  const Flavor& f = flavor();
  std::string lookedIn, tried;
  for (const Candidate& c : candidates(f, &lookedIn)) {
    Library lib;
    lib.flavor = &f;
    std::string err;
    Opened o = tryOpen(c, f, host, &lib, &err);
    if (o == Opened::kOk) {
      loaded = new Library(lib);
      return loaded;
    }
    if (c.where == f.envVar) {
      *why = std::string(f.envVar) + "=" + c.spec + ": cannot load it: " + err;
      return nullptr;
    }
    // A library that loads but is not usable is the answer: do not fall back to another copy.
    if (o == Opened::kUnusable) {
      *why = err + ". Set " + f.envVar + " to the path of a working " + f.name + " library.";
      return nullptr;
    }
    tried += "\n  " + c.spec + " (" + c.where + "): " + err;
  }
  *why = std::string("cannot find the ") + f.name + " library (" + f.libs[0] + "); " + f.envVar +
         " is not set." + (lookedIn.empty() ? "" : "\nLooked in:" + lookedIn) +
         (tried.empty() ? "" : "\nTried:" + tried) + "\nSet " + f.envVar + " to its path, or " +
         f.wheelHint + ".";
  return nullptr;
}

}  // namespace nccl
}  // namespace accl
