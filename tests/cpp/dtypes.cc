#include "dtypes.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>

#include "harness.h"

namespace at {

namespace {

const TypeInfo kTypes[] = {
    {acclInt8, "int8", 1, true, true},          {acclUint8, "uint8", 1, true, false},
    {acclInt32, "int32", 4, true, true},        {acclUint32, "uint32", 4, true, false},
    {acclInt64, "int64", 8, true, true},        {acclUint64, "uint64", 8, true, false},
    {acclFloat16, "float16", 2, false, true},   {acclFloat32, "float32", 4, false, true},
    {acclFloat64, "float64", 8, false, true},   {acclBfloat16, "bfloat16", 2, false, true},
    {acclFloat8e4m3, "fp8e4m3", 1, false, true}, {acclFloat8e5m2, "fp8e5m2", 1, false, true},
};

// Largest |partial sum| for which every integer is exact (or the integer range is safe).
long double sumBound(acclDataType_t dt) {
  switch (dt) {
    case acclInt8: return 120;
    case acclUint8: return 250;
    case acclFloat16: return 2000;
    case acclBfloat16: return 250;
    case acclFloat8e4m3: return 16;
    case acclFloat8e5m2: return 8;
    default: return 1e9;
  }
}

// Relative precision of the type (for Avg on floating types).
long double relEps(acclDataType_t dt) {
  switch (dt) {
    case acclFloat16: return std::ldexp(1.0L, -10);
    case acclFloat32: return std::ldexp(1.0L, -23);
    case acclFloat64: return std::ldexp(1.0L, -52);
    case acclBfloat16: return std::ldexp(1.0L, -7);
    case acclFloat8e4m3: return std::ldexp(1.0L, -3);
    case acclFloat8e5m2: return std::ldexp(1.0L, -2);
    default: return 0;
  }
}

struct Fp8Table {
  std::map<float, uint8_t> enc;  // finite value -> code (+0 for zero)
  std::vector<long double> finite;
};

const Fp8Table& fp8Table(acclDataType_t dt) {
  static std::once_flag once;
  static Fp8Table tables[2];
  std::call_once(once, [] {
    for (int k = 0; k < 2; ++k) {
      for (int c = 0; c < 256; ++c) {
        float v = k == 0 ? fp8e4m3ToFloat(static_cast<uint8_t>(c))
                         : fp8e5m2ToFloat(static_cast<uint8_t>(c));
        if (!std::isfinite(v)) continue;
        if (tables[k].enc.count(v)) continue;  // -0 maps to the code of +0
        tables[k].enc[v] = static_cast<uint8_t>(c);
        tables[k].finite.push_back(v);
      }
    }
  });
  return tables[dt == acclFloat8e4m3 ? 0 : 1];
}

[[noreturn]] void testBug(const std::string& msg) {
  reportFailure(__FILE__, __LINE__, "test bug: " + msg);
  throw FatalError{};
}

// A pool of values for Max/Min.
const std::vector<long double>& maxMinPool(acclDataType_t dt) {
  static std::once_flag once;
  static std::map<int, std::vector<long double>> pools;
  std::call_once(once, [] {
    for (const auto& t : kTypes) {
      std::vector<long double> p;
      if (t.dt == acclFloat8e4m3 || t.dt == acclFloat8e5m2) {
        p = fp8Table(t.dt).finite;
      } else {
        if (t.isSigned)
          for (int v = -20; v <= 20; ++v) p.push_back(v);
        else
          for (int v = 0; v <= 40; ++v) p.push_back(v);
        switch (t.dt) {
          case acclInt8: p.push_back(-128), p.push_back(127); break;
          case acclUint8: p.push_back(255); break;
          case acclInt32: p.push_back(INT32_MIN), p.push_back(INT32_MAX); break;
          case acclUint32: p.push_back(UINT32_MAX); break;
          case acclInt64:
            p.push_back(static_cast<long double>(INT64_MIN));
            p.push_back(static_cast<long double>(INT64_MAX));
            p.push_back(static_cast<long double>(INT64_MAX - 1));
            break;
          case acclUint64:
            p.push_back(static_cast<long double>(UINT64_MAX));
            p.push_back(static_cast<long double>(UINT64_MAX - 1));
            break;
          case acclFloat16:
            for (long double v : {65504.0L, -65504.0L, 0.5L, -0.25L, std::ldexp(1.0L, -24),
                                  std::ldexp(1.0L, -14)})
              p.push_back(v);
            break;
          case acclBfloat16:
            for (long double v : {std::ldexp(1.0L, 100), -std::ldexp(1.0L, 100),
                                  std::ldexp(1.0L, -100), 0.5L})
              p.push_back(v);
            break;
          case acclFloat32:
            for (long double v : {std::ldexp(1.5L, 127), -std::ldexp(1.5L, 127),
                                  std::ldexp(1.0L, -149), static_cast<long double>(0.1f)})
              p.push_back(v);
            break;
          case acclFloat64:
            for (long double v : {std::ldexp(1.5L, 1023), -std::ldexp(1.5L, 1023),
                                  std::ldexp(1.0L, -1074), static_cast<long double>(0.1)})
              p.push_back(v);
            break;
          default: break;
        }
      }
      pools[t.dt] = p;
    }
  });
  return pools.at(dt);
}

std::string showLD(long double v) { return show(v); }

}  // namespace

const TypeInfo& typeInfo(acclDataType_t dt) {
  for (const auto& t : kTypes)
    if (t.dt == dt) return t;
  testBug("typeInfo of unknown type " + std::to_string(static_cast<int>(dt)));
}

const std::vector<acclDataType_t>& allTypes() {
  static const std::vector<acclDataType_t> v = {
      acclInt8,    acclUint8,   acclInt32,    acclUint32,     acclInt64,     acclUint64,
      acclFloat16, acclFloat32, acclFloat64, acclBfloat16, acclFloat8e4m3, acclFloat8e5m2};
  return v;
}

const char* opName(acclRedOp_t op) {
  switch (op) {
    case acclSum: return "sum";
    case acclProd: return "prod";
    case acclMax: return "max";
    case acclMin: return "min";
    case acclAvg: return "avg";
    default: return "op?";
  }
}

const std::vector<acclRedOp_t>& allOps() {
  static const std::vector<acclRedOp_t> v = {acclSum, acclProd, acclMax, acclMin, acclAvg};
  return v;
}

// ------------------------------------------------------------------ conversions

uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0));
  int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    int shift = 14 - e;
    uint32_t h = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;  // may carry into the exponent: ok
  return static_cast<uint16_t>(sign | h);
}

float halfToFloat(uint16_t h) {
  int sign = (h >> 15) & 1;
  int exp = (h >> 10) & 0x1f;
  int mant = h & 0x3ff;
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31)
    v = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else
    v = std::ldexp(static_cast<float>(1024 + mant), exp - 25);
  return sign ? -v : v;
}

uint16_t floatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // NaN
  x += 0x7fffu + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

float bf16ToFloat(uint16_t b) {
  uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

float fp8e4m3ToFloat(uint8_t b) {
  int sign = b >> 7;
  int exp = (b >> 3) & 0xf;
  int mant = b & 7;
  float v;
  if (exp == 15 && mant == 7)
    v = std::numeric_limits<float>::quiet_NaN();
  else if (exp == 0)
    v = std::ldexp(static_cast<float>(mant), -9);
  else
    v = std::ldexp(static_cast<float>(8 + mant), exp - 10);
  return sign ? -v : v;
}

float fp8e5m2ToFloat(uint8_t b) {
  int sign = b >> 7;
  int exp = (b >> 2) & 0x1f;
  int mant = b & 3;
  float v;
  if (exp == 31)
    v = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else if (exp == 0)
    v = std::ldexp(static_cast<float>(mant), -16);
  else
    v = std::ldexp(static_cast<float>(4 + mant), exp - 17);
  return sign ? -v : v;
}

void encode(acclDataType_t dt, long double v, void* dst) {
  switch (dt) {
    case acclInt8: { int8_t x = static_cast<int8_t>(static_cast<int64_t>(v)); std::memcpy(dst, &x, 1); return; }
    case acclUint8: { uint8_t x = static_cast<uint8_t>(static_cast<uint64_t>(v)); std::memcpy(dst, &x, 1); return; }
    case acclInt32: { int32_t x = static_cast<int32_t>(static_cast<int64_t>(v)); std::memcpy(dst, &x, 4); return; }
    case acclUint32: { uint32_t x = static_cast<uint32_t>(static_cast<uint64_t>(v)); std::memcpy(dst, &x, 4); return; }
    case acclInt64: { int64_t x = static_cast<int64_t>(v); std::memcpy(dst, &x, 8); return; }
    case acclUint64: { uint64_t x = static_cast<uint64_t>(v); std::memcpy(dst, &x, 8); return; }
    case acclFloat32: {
      float x = static_cast<float>(v);
      if (static_cast<long double>(x) != v) testBug("value not exact in float32: " + showLD(v));
      std::memcpy(dst, &x, 4);
      return;
    }
    case acclFloat64: {
      double x = static_cast<double>(v);
      if (static_cast<long double>(x) != v) testBug("value not exact in float64: " + showLD(v));
      std::memcpy(dst, &x, 8);
      return;
    }
    case acclFloat16: {
      uint16_t h = floatToHalf(static_cast<float>(v));
      if (static_cast<long double>(halfToFloat(h)) != v) testBug("value not exact in float16: " + showLD(v));
      std::memcpy(dst, &h, 2);
      return;
    }
    case acclBfloat16: {
      uint16_t h = floatToBf16(static_cast<float>(v));
      if (static_cast<long double>(bf16ToFloat(h)) != v) testBug("value not exact in bfloat16: " + showLD(v));
      std::memcpy(dst, &h, 2);
      return;
    }
    case acclFloat8e4m3:
    case acclFloat8e5m2: {
      const auto& t = fp8Table(dt);
      auto it = t.enc.find(static_cast<float>(v));
      if (it == t.enc.end() || static_cast<long double>(it->first) != v)
        testBug(std::string("value not exact in ") + typeName(dt) + ": " + showLD(v));
      std::memcpy(dst, &it->second, 1);
      return;
    }
    default: testBug("encode of unknown type");
  }
}

long double decode(acclDataType_t dt, const void* src) {
  switch (dt) {
    case acclInt8: { int8_t x; std::memcpy(&x, src, 1); return x; }
    case acclUint8: { uint8_t x; std::memcpy(&x, src, 1); return x; }
    case acclInt32: { int32_t x; std::memcpy(&x, src, 4); return x; }
    case acclUint32: { uint32_t x; std::memcpy(&x, src, 4); return x; }
    case acclInt64: { int64_t x; std::memcpy(&x, src, 8); return static_cast<long double>(x); }
    case acclUint64: { uint64_t x; std::memcpy(&x, src, 8); return static_cast<long double>(x); }
    case acclFloat32: { float x; std::memcpy(&x, src, 4); return x; }
    case acclFloat64: { double x; std::memcpy(&x, src, 8); return x; }
    case acclFloat16: { uint16_t x; std::memcpy(&x, src, 2); return halfToFloat(x); }
    case acclBfloat16: { uint16_t x; std::memcpy(&x, src, 2); return bf16ToFloat(x); }
    case acclFloat8e4m3: { uint8_t x; std::memcpy(&x, src, 1); return fp8e4m3ToFloat(x); }
    case acclFloat8e5m2: { uint8_t x; std::memcpy(&x, src, 1); return fp8e5m2ToFloat(x); }
    default: testBug("decode of unknown type");
  }
}

// ------------------------------------------------------------------ buffers

namespace {
bool inHostMemory() {
  const char* v = std::getenv("ACCL_TEST_HOST_MEMORY");
  if (!v) return false;
  return std::string(v) == "all" || (std::string(v) == "odd" && at::rankLabel() % 2 == 1);
}
}  // namespace

Buf::Buf(size_t bytes, uint8_t fill) : host_(inHostMemory()), bytes_(bytes) {
  const size_t total = bytes + 2 * kGuard;
  void* p = nullptr;
  if (host_ && acclHostAlloc(&p, total) != acclSuccess)
    throw std::runtime_error(std::string("acclHostAlloc: ") + acclGetLastError(nullptr));
  if (!host_) mem_.resize(total);
  base_ = host_ ? static_cast<uint8_t*>(p) : mem_.data();
  std::memset(base_, kGuardByte, kGuard);
  std::memset(base_ + kGuard, fill, bytes);
  std::memset(base_ + kGuard + bytes, kGuardByte, kGuard);
}

Buf::~Buf() {
  if (host_) acclHostFree(base_);
}

bool Buf::guardsOk(const std::string& what) const {
  for (size_t i = 0; i < kGuard; ++i) {
    if (base_[i] != kGuardByte) {
      reportFailure(__FILE__, __LINE__,
                    what + ": write before the start of a buffer (" +
                        std::to_string(kGuard - i) + " bytes before it)");
      return false;
    }
    if (base_[kGuard + bytes_ + i] != kGuardByte) {
      reportFailure(__FILE__, __LINE__,
                    what + ": write past the end of a buffer of " + std::to_string(bytes_) +
                        " bytes (at byte " + std::to_string(bytes_ + i) + ")");
      return false;
    }
  }
  return true;
}

// ------------------------------------------------------------------ reduction values

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

long double redValue(acclDataType_t dt, acclRedOp_t op, int nranks, int rank, size_t i) {
  const TypeInfo& t = typeInfo(dt);
  uint64_t h = mix64((static_cast<uint64_t>(rank) << 48) ^ i);
  uint64_t r = static_cast<uint64_t>(rank);
  switch (op) {
    case acclProd: {
      long double v = 1;
      if ((i + r) % 8 == 0) v = 2;  // at most one rank per position (nranks <= 8)
      if (!isFp8(dt) && t.size >= 2 && (i + 2 * r) % 7 == 0) v *= 3;
      if (t.isSigned && (i + 3 * r) % 5 == 1) v = -v;
      return v;
    }
    case acclMax:
    case acclMin: {
      const auto& pool = maxMinPool(dt);
      return pool[h % pool.size()];
    }
    case acclSum:
    case acclAvg:
    default: {
      long double bound = sumBound(dt) / nranks;
      int64_t m = static_cast<int64_t>(std::min<long double>(100, std::floor(bound)));
      long double v = static_cast<long double>(h % static_cast<uint64_t>(m + 1));
      if (t.isSigned && op == acclSum) v -= m / 2;
      switch (dt) {
        case acclInt32:
        case acclUint32: v += std::ldexp(static_cast<long double>(rank + 1), 20); break;
        case acclInt64:
        case acclUint64: v += std::ldexp(static_cast<long double>(rank + 1), 40); break;
        case acclFloat32: v *= 0.25L; break;
        case acclFloat64: v = v * 0.25L + std::ldexp(static_cast<long double>(rank + 1), 30); break;
        default: break;
      }
      return v;
    }
  }
}

void fillRed(void* dst, acclDataType_t dt, acclRedOp_t op, int nranks, int rank, size_t count,
             size_t firstIndex) {
  size_t es = esize(dt);
  uint8_t* p = static_cast<uint8_t*>(dst);
  for (size_t i = 0; i < count; ++i) encode(dt, redValue(dt, op, nranks, rank, firstIndex + i), p + i * es);
}

long double redReference(acclDataType_t dt, acclRedOp_t op, int nranks, size_t i) {
  long double acc = redValue(dt, op, nranks, 0, i);
  for (int r = 1; r < nranks; ++r) {
    long double v = redValue(dt, op, nranks, r, i);
    switch (op) {
      case acclSum:
      case acclAvg: acc += v; break;
      case acclProd: acc *= v; break;
      case acclMax: acc = std::max(acc, v); break;
      case acclMin: acc = std::min(acc, v); break;
      default: break;
    }
  }
  if (op == acclAvg) {
    if (typeInfo(dt).isInt) {
      __int128 s = static_cast<__int128>(acc);
      acc = static_cast<long double>(s / nranks);
    } else {
      acc /= nranks;
    }
  }
  return acc;
}

namespace {

bool closeEnough(acclDataType_t dt, acclRedOp_t op, int nranks, size_t i, long double got,
                 long double ref) {
  if (std::isnan(got)) return false;
  if (op != acclAvg || typeInfo(dt).isInt) return got == ref;
  long double meanAbs = 0;
  for (int r = 0; r < nranks; ++r) meanAbs += std::fabs(redValue(dt, op, nranks, r, i));
  meanAbs /= nranks;
  long double scale = std::max<long double>({1.0L, std::fabs(ref), meanAbs});
  return std::fabs(got - ref) <= 2 * relEps(dt) * scale;
}

std::string inputsAt(acclDataType_t dt, acclRedOp_t op, int nranks, size_t i) {
  std::string s = "inputs by rank: ";
  for (int r = 0; r < nranks && r < 8; ++r)
    s += (r ? ", " : "") + showLD(redValue(dt, op, nranks, r, i));
  return s;
}

}  // namespace

bool checkRed(const void* got, acclDataType_t dt, acclRedOp_t op, int nranks, size_t count,
              size_t firstIndex, const std::string& what) {
  size_t es = esize(dt);
  const uint8_t* p = static_cast<const uint8_t*>(got);
  size_t bad = 0;
  for (size_t i = 0; i < count; ++i) {
    long double g = decode(dt, p + i * es);
    long double ref = redReference(dt, op, nranks, firstIndex + i);
    if (closeEnough(dt, op, nranks, firstIndex + i, g, ref)) continue;
    if (bad < 3)
      reportFailure(__FILE__, __LINE__,
                    what + ": element " + std::to_string(i) + " is " + showLD(g) +
                        ", expected " + showLD(ref) + " (" +
                        inputsAt(dt, op, nranks, firstIndex + i) + ")");
    ++bad;
  }
  if (bad > 3)
    reportFailure(__FILE__, __LINE__,
                  what + ": " + std::to_string(bad) + " of " + std::to_string(count) +
                      " elements are wrong");
  return bad == 0;
}

bool checkRedInput(const void* got, acclDataType_t dt, acclRedOp_t op, int nranks, int rank,
                   size_t count, size_t firstIndex, const std::string& what) {
  size_t es = esize(dt);
  std::vector<uint8_t> exp(count * es);
  fillRed(exp.data(), dt, op, nranks, rank, count, firstIndex);
  const uint8_t* p = static_cast<const uint8_t*>(got);
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(p + i * es, exp.data() + i * es, es) != 0) {
      reportFailure(__FILE__, __LINE__,
                    what + ": input buffer changed at element " + std::to_string(i) + ": " +
                        showLD(decode(dt, p + i * es)) + " instead of " +
                        showLD(decode(dt, exp.data() + i * es)));
      return false;
    }
  }
  return true;
}

// ------------------------------------------------------------------ byte patterns

uint8_t patByte(int rank, uint64_t salt, size_t byteIndex) {
  uint64_t w = mix64((static_cast<uint64_t>(rank) * 0x100000001b3ull) ^ (salt << 40) ^
                     (static_cast<uint64_t>(byteIndex) >> 3));
  return static_cast<uint8_t>(w >> (8 * (byteIndex & 7)));
}

void fillPat(void* dst, size_t bytes, int rank, uint64_t salt, size_t byteOffset) {
  uint8_t* p = static_cast<uint8_t*>(dst);
  size_t j = 0;
  while (j < bytes) {
    size_t idx = byteOffset + j;
    uint64_t w = mix64((static_cast<uint64_t>(rank) * 0x100000001b3ull) ^ (salt << 40) ^
                       (static_cast<uint64_t>(idx) >> 3));
    for (size_t b = idx & 7; b < 8 && j < bytes; ++b, ++j) p[j] = static_cast<uint8_t>(w >> (8 * b));
  }
}

bool checkPat(const void* got, size_t bytes, int rank, uint64_t salt, size_t byteOffset,
              size_t es, const std::string& what) {
  std::vector<uint8_t> exp(bytes);
  fillPat(exp.data(), bytes, rank, salt, byteOffset);
  if (bytes == 0 || std::memcmp(got, exp.data(), bytes) == 0) return true;
  const uint8_t* p = static_cast<const uint8_t*>(got);
  size_t first = 0;
  while (p[first] == exp[first]) ++first;
  size_t badElems = 0;
  for (size_t e = 0; e < bytes / es; ++e)
    if (std::memcmp(p + e * es, exp.data() + e * es, es) != 0) ++badElems;
  auto hex = [&](const uint8_t* q) {
    static const char* d = "0123456789abcdef";
    std::string s;
    size_t e0 = (first / es) * es;
    for (size_t k = 0; k < es && e0 + k < bytes; ++k) s += d[q[e0 + k] >> 4], s += d[q[e0 + k] & 15];
    return s;
  };
  std::string hint;
  if (std::all_of(p + first, p + std::min(bytes, first + es), [](uint8_t b) { return b == kSentinel; }))
    hint = " (still the receive buffer's initial fill: nothing was written there)";
  reportFailure(__FILE__, __LINE__,
                what + ": element " + std::to_string(first / es) + " is 0x" + hex(p) +
                    ", expected 0x" + hex(exp.data()) + " (from rank " + std::to_string(rank) +
                    ")" + hint + "; " + std::to_string(badElems) + " of " +
                    std::to_string(bytes / es) + " elements differ");
  return false;
}

bool checkFill(const void* got, size_t bytes, uint8_t fill, const std::string& what) {
  const uint8_t* p = static_cast<const uint8_t*>(got);
  for (size_t j = 0; j < bytes; ++j) {
    if (p[j] != fill) {
      reportFailure(__FILE__, __LINE__,
                    what + ": a buffer that must not be written was changed at byte " +
                        std::to_string(j));
      return false;
    }
  }
  return true;
}

}  // namespace at
