// Element types, reference values and buffer checks for the accl tests.
//
// Every element value is modelled as a long double (exact for every int64/uint64 value on
// x86-64 and for every value of the floating-point types). Values are chosen so that the
// reference result is exact for every type and op:
//   Sum:  small integers (plus large per-rank offsets for the wide integer types) with sums
//         inside the exactly representable integer range of the type (256 for bfloat16, 2048 for
//         float16, 16 for fp8 e4m3, 8 for fp8 e5m2, and no overflow for int8/uint8);
//   Prod: mostly 1, at most one rank contributes 2 per position, signed types get some -1,
//         wide types some 3 (|product| <= 18);
//   Max/Min: values from a pool that includes the type's extremes (and every finite fp8 value);
//   Avg:  as Sum but non-negative; integer types divide the exact sum (truncation), floating
//         types are compared to sum/nranks within a few units of the type's precision.
#ifndef ACCL_TESTS_DTYPES_H_
#define ACCL_TESTS_DTYPES_H_

#include <accl/accl.h>

#include <cstdint>
#include <string>
#include <vector>

namespace at {

struct TypeInfo {
  acclDataType_t dt;
  const char* name;
  size_t size;
  bool isInt;
  bool isSigned;
};

const TypeInfo& typeInfo(acclDataType_t dt);
inline size_t esize(acclDataType_t dt) { return typeInfo(dt).size; }
inline const char* typeName(acclDataType_t dt) { return typeInfo(dt).name; }
inline bool isFp8(acclDataType_t dt) { return dt == acclFloat8e4m3 || dt == acclFloat8e5m2; }
const std::vector<acclDataType_t>& allTypes();  // all 12, fp8 included
const char* opName(acclRedOp_t op);
const std::vector<acclRedOp_t>& allOps();

// Conversions written for the tests (round to nearest even).
uint16_t floatToHalf(float f);
float halfToFloat(uint16_t h);
uint16_t floatToBf16(float f);
float bf16ToFloat(uint16_t b);
float fp8e4m3ToFloat(uint8_t b);
float fp8e5m2ToFloat(uint8_t b);

// Stores v (which must be exactly representable; a test bug otherwise) as one element.
void encode(acclDataType_t dt, long double v, void* dst);
long double decode(acclDataType_t dt, const void* src);

// ------------------------------------------------------------------ buffers

constexpr uint8_t kSentinel = 0xCD;  // initial content of receive buffers
constexpr uint8_t kGuardByte = 0xEB;
constexpr size_t kGuard = 64;

// A byte buffer with guard zones before and after; guardsOk() reports writes outside it.
// ACCL_TEST_HOST_MEMORY=all puts every rank's buffers in shared host memory (acclHostAlloc),
// =odd only the odd ranks' (collectives between shared and private buffers).
class Buf {
 public:
  explicit Buf(size_t bytes = 0, uint8_t fill = kSentinel);
  ~Buf();
  Buf(Buf&& o) noexcept  // a moved vector keeps its memory, so base_ stays valid
      : mem_(std::move(o.mem_)), base_(o.base_), host_(o.host_), bytes_(o.bytes_) {
    o.host_ = false;
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  uint8_t* data() { return base_ + kGuard; }
  const uint8_t* data() const { return base_ + kGuard; }
  uint8_t* at(size_t byteOffset) { return data() + byteOffset; }
  size_t bytes() const { return bytes_; }
  bool guardsOk(const std::string& what) const;

 private:
  std::vector<uint8_t> mem_;  // private memory; empty when in host memory
  uint8_t* base_;
  bool host_;
  size_t bytes_;
};

// ------------------------------------------------------------------ reduction values

long double redValue(acclDataType_t dt, acclRedOp_t op, int nranks, int rank, size_t i);
// Element i of dst gets redValue(..., firstIndex + i).
void fillRed(void* dst, acclDataType_t dt, acclRedOp_t op, int nranks, int rank, size_t count,
             size_t firstIndex = 0);
// The exact reference of op over ranks 0..nranks-1 of redValue(..., i).
long double redReference(acclDataType_t dt, acclRedOp_t op, int nranks, size_t i);
// Checks count elements of got against redReference(firstIndex + i); reports the first
// mismatches with `what` and returns false on any.
bool checkRed(const void* got, acclDataType_t dt, acclRedOp_t op, int nranks, size_t count,
              size_t firstIndex, const std::string& what);
// Checks that got holds this rank's own inputs (a buffer that must not change).
bool checkRedInput(const void* got, acclDataType_t dt, acclRedOp_t op, int nranks, int rank,
                   size_t count, size_t firstIndex, const std::string& what);

// ------------------------------------------------------------------ byte patterns

// A pseudo-random byte stream per (rank, salt), addressed by byte index.
uint8_t patByte(int rank, uint64_t salt, size_t byteIndex);
void fillPat(void* dst, size_t bytes, int rank, uint64_t salt, size_t byteOffset = 0);
// got[j] == patByte(rank, salt, byteOffset + j) for j < bytes; reports the first mismatching
// element (of esize bytes) and the count.
bool checkPat(const void* got, size_t bytes, int rank, uint64_t salt, size_t byteOffset,
              size_t esize, const std::string& what);
// All bytes equal `fill` (an untouched buffer).
bool checkFill(const void* got, size_t bytes, uint8_t fill, const std::string& what);

uint64_t mix64(uint64_t x);

}  // namespace at

#endif  // ACCL_TESTS_DTYPES_H_
