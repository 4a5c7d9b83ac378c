// Run-and-check helpers for one collective on all ranks of a Ctx. Each helper fills the inputs,
// calls the collective (in place with the layout of accl.h when inPlace), and checks the result
// against a host reference, the inputs that must not change, buffers that must stay untouched,
// and the guard zones around every buffer.
#ifndef ACCL_TESTS_COLL_UTIL_H_
#define ACCL_TESTS_COLL_UTIL_H_

#include <string>

#include "dtypes.h"
#include "harness.h"

namespace at {

// An all-reduce of a few int32 that must succeed and be right: "the communicator still works".
void sanityAllReduce(Ctx& c, const std::string& after);

// Makes the communicator of c.ids[id] with a timeout of `seconds`, checks it with
// sanityAllReduce and makes it c.comm; returns it.
acclComm_t initWithTimeout(Ctx& c, int id, double seconds);

// Handles the result of a collective: true to go on and check the data. For fp8 types a
// failure is accepted if it carries a message (the backend may not support fp8); then the
// communicator must still work and false is returned. Any other failure is fatal.
bool acceptResult(Ctx& c, acclResult_t r, acclDataType_t dt, const std::string& what);

std::string describe(const char* coll, const Ctx& c, acclDataType_t dt, size_t count,
                     bool inPlace, int op = -1, int root = -1);

void runAllReduce(Ctx& c, acclDataType_t dt, acclRedOp_t op, size_t count, bool inPlace);
void runBroadcast(Ctx& c, acclDataType_t dt, size_t count, int root, bool inPlace, uint64_t salt);
void runReduce(Ctx& c, acclDataType_t dt, acclRedOp_t op, size_t count, int root, bool inPlace);
void runAllGather(Ctx& c, acclDataType_t dt, size_t count, bool inPlace, uint64_t salt);
void runReduceScatter(Ctx& c, acclDataType_t dt, acclRedOp_t op, size_t count, bool inPlace);
void runAlltoAll(Ctx& c, acclDataType_t dt, size_t count, bool inPlace, uint64_t salt);
void runGather(Ctx& c, acclDataType_t dt, size_t count, int root, bool inPlace, uint64_t salt);
void runScatter(Ctx& c, acclDataType_t dt, size_t count, int root, bool inPlace, uint64_t salt);
// Checks that no rank leaves acclBarrier before every rank has entered it (3 rounds).
void runBarrier(Ctx& c, int counterSlot);

}  // namespace at

#endif  // ACCL_TESTS_COLL_UTIL_H_
