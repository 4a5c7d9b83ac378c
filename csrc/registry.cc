// Finds and initialises backends. Built-in backends are registered through the same
// acclBackend_v1 struct that plugins export.
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

}  // namespace

std::string takeBackendMessage() {
  std::string m;
  m.swap(tlsBackendMessage);
  return m;
}

void setBackendMessage(const std::string& msg) { tlsBackendMessage = msg; }

const acclBackend_v1* findBackend(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, const acclBackend_v1*> ready;
  std::lock_guard<std::mutex> lock(mu);
  auto it = ready.find(name);
  if (it != ready.end()) return it->second;
  const acclBackend_v1* b = nullptr;
  if (name == acclCpuBackend.name) b = &acclCpuBackend;
  if (!b) ACCL_THROW(acclInvalidArgument, "unknown backend '%s' (this build offers: cpu)",
                     name.c_str());
  if (b->abiVersion != ACCL_BACKEND_ABI_VERSION)
    ACCL_THROW(acclInvalidUsage, "backend '%s' has ABI version %u, this library speaks %u",
               name.c_str(), b->abiVersion, ACCL_BACKEND_ABI_VERSION);
  acclResult_t r = b->init(&kHost);
  if (r != acclSuccess)
    ACCL_THROW(r, "backend '%s' failed to initialise: %s", name.c_str(),
               takeBackendMessage().c_str());
  ACCL_INFO("INIT", "backend %s ready", name.c_str());
  ready[name] = b;
  return b;
}

}  // namespace accl
