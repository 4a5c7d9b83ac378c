// Collectives the core builds from a backend's send/recv, inside one backend group, when the
// backend answers acclNotSupported (or ACCL_COMPOSE forces it, for tests).
#pragma once

#include <functional>

#include "comm.h"

namespace accl {

bool compositionForced(const Comm& c, const char* collective);
void noteComposition(const char* collective);

// Runs `native`; runs `composed` instead when ACCL_COMPOSE names `collective`, or when `native`
// returns acclNotSupported. A template: it sits on the path of every call of those collectives.
template <class Native, class Composed>
acclResult_t withComposition(const Comm& c, const char* collective, const Native& native,
                             const Composed& composed) {
  if (compositionForced(c, collective)) return composed();
  acclResult_t r = native();
  if (r != acclNotSupported) return r;
  noteComposition(collective);
  return composed();
}

acclResult_t composeBroadcast(Comm& c, const void* send, void* recv, size_t count,
                              acclDataType_t type, int root, void* stream);
acclResult_t composeGather(Comm& c, const void* send, void* recv, size_t count,
                           acclDataType_t type, int root, void* stream);
acclResult_t composeScatter(Comm& c, const void* send, void* recv, size_t count,
                            acclDataType_t type, int root, void* stream);
acclResult_t composeAlltoAll(Comm& c, const void* send, void* recv, size_t count,
                             acclDataType_t type, void* stream);
acclResult_t composeBarrier(Comm& c, void* stream);

}  // namespace accl
