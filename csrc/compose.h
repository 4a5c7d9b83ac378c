// Collectives the core builds from a backend's send/recv, inside one backend group, when the
// backend answers acclNotSupported (or ACCL_COMPOSE forces it, for tests).
#pragma once

#include <functional>

#include "comm.h"

namespace accl {

// Runs `native`; runs `composed` instead when ACCL_COMPOSE names `collective`, or when `native`
// returns acclNotSupported.
acclResult_t withComposition(const char* collective, const std::function<acclResult_t()>& native,
                             const std::function<acclResult_t()>& composed);

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
