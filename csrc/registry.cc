// Finds, loads and initialises backends. The built-in cpu backend is registered through the
// same acclBackend_v1 struct that plugins export.
#include <dlfcn.h>

#include <cstdarg>
#include <map>
#include <mutex>

#include "comm.h"
#include "errors.h"
#include "logging.h"

extern "C" const acclBackend_v1 acclCpuBackend;  // backends/cpu

namespace accl {
namespace {

thread_local std::string tlsBackendMessage;

void hostSetError(const char* fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  tlsBackendMessage = buf;
}

const acclBackendHost_v1 kHost = {sizeof(acclBackendHost_v1), ACCL_BACKEND_ABI_VERSION, &log,
                                  &hostSetError};

// The ABI versions this library can drive, newest first. A later version adds its symbol here.
const char* const kPluginSymbols[] = {"acclBackendPlugin_v1"};
constexpr int kNewestAbi = 1;

std::string libaccDir() {
  Dl_info info;
  if (!dladdr(reinterpret_cast<void*>(&libaccDir), &info) || !info.dli_fname) return "";
  std::string p = info.dli_fname;
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? "" : p.substr(0, slash);
}

// Opens a plugin and returns its table; `path` names the library it came from.
const acclBackend_v1* loadPlugin(const std::string& spec, std::string* path) {
  std::vector<std::string> tries;
  if (spec.find('/') != std::string::npos) {
    tries.push_back(spec);
  } else {
    for (char ch : spec)
      ACCL_ARG_CHECK(isalnum((unsigned char)ch) || ch == '_' || ch == '-',
                     "backend name '%s' may hold only letters, digits, '_' and '-'", spec.c_str());
    std::string file = "libaccl-backend-" + spec + ".so";
    std::string dir = libaccDir();
    if (!dir.empty()) tries.push_back(dir + "/" + file);
    tries.push_back(file);  // the dynamic loader's search path
  }
  std::string why;
  void* h = nullptr;
  for (auto& t : tries) {
    h = dlopen(t.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h) {
      *path = t;
      break;
    }
    why += format("\n  %s: %s", t.c_str(), dlerror());
  }
  if (!h)
    ACCL_THROW(acclInvalidArgument, "backend '%s' is not available (built in: cpu); tried:%s",
               spec.c_str(), why.c_str());
  Dl_info info;
  for (const char* sym : kPluginSymbols) {
    void* t = dlsym(h, sym);
    if (!t) continue;
    if (dladdr(t, &info) && info.dli_fname) *path = info.dli_fname;
    return static_cast<const acclBackend_v1*>(t);
  }
  for (int v = kNewestAbi + 1; v < kNewestAbi + 10; ++v)
    if (dlsym(h, format("acclBackendPlugin_v%d", v).c_str()))
      ACCL_THROW(acclInvalidUsage, "%s is a plugin for backend ABI v%d; this accl speaks up to "
                 "v%d: update accl or use a plugin built for it", path->c_str(), v, kNewestAbi);
  ACCL_THROW(acclInvalidUsage, "%s exports no acclBackendPlugin_v%d: it is not an accl backend "
             "plugin, or one for an ABI older than any this accl supports", path->c_str(),
             kNewestAbi);
}

}  // namespace

std::string takeBackendMessage() {
  std::string m;
  m.swap(tlsBackendMessage);
  return m;
}

void clearBackendMessage() { tlsBackendMessage.clear(); }

void setBackendMessage(const std::string& msg) { tlsBackendMessage = msg; }

const BackendInfo& findBackend(const std::string& spec) {
  static std::mutex mu;
  static std::map<std::string, BackendInfo> ready;
  std::lock_guard<std::mutex> lock(mu);
  auto it = ready.find(spec);
  if (it != ready.end()) return it->second;
  BackendInfo info;
  if (spec == acclCpuBackend.name) {
    info.table = &acclCpuBackend;
    info.path = "(built into libaccl)";
  } else {
    info.table = loadPlugin(spec, &info.path);
  }
  const acclBackend_v1* b = info.table;
  if (!b->name || b->abiVersion != ACCL_BACKEND_ABI_VERSION)
    ACCL_THROW(acclInvalidUsage, "backend %s declares ABI version %u in its acclBackendPlugin_v1 "
               "table; expected %u", info.path.c_str(), b->abiVersion, ACCL_BACKEND_ABI_VERSION);
  clearBackendMessage();
  acclResult_t r = b->init(&kHost);
  if (r != acclSuccess)
    ACCL_THROW(r, "backend '%s' (%s) failed to initialise: %s", b->name, info.path.c_str(),
               takeBackendMessage().c_str());
  r = b->getVersion(&info.version, &info.versionString);
  if (r != acclSuccess || !info.versionString)
    ACCL_THROW(r ? r : acclInternalError, "backend '%s' could not report its version: %s", b->name,
               takeBackendMessage().c_str());
  ACCL_INFO("INIT", "backend %s %s from %s", b->name, info.versionString, info.path.c_str());
  return ready.emplace(spec, info).first->second;
}

}  // namespace accl
