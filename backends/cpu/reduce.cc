#include "reduce.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "errors.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

// Half-precision kernels are built twice, for the baseline and for x86-64-v3 (AVX2, F16C, FMA),
// and the loader picks the best the CPU has: one binary, full speed where the CPU allows.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define ACCL_MULTIVERSION __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define ACCL_MULTIVERSION
#endif

namespace accl {
namespace cpu {
namespace {

inline uint32_t floatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
inline float bitsFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// ---- element types: how to load into the accumulator and store back

template <class T>
struct Native {
  using Elem = T;
  // Integer sums and products wrap (computed unsigned: no signed-overflow UB).
  using Acc = typename std::conditional_t<std::is_integral<T>::value, std::make_unsigned<T>,
                                          std::common_type<T>>::type;
  static Acc load(T v) { return static_cast<Acc>(v); }
  static T store(Acc a) { return static_cast<T>(a); }
};

struct Bf16 {
  using Elem = uint16_t;
  using Acc = float;
  static float load(uint16_t v) { return bitsFloat(uint32_t(v) << 16); }
  static uint16_t store(float f) {
    uint32_t u = floatBits(f);
    uint32_t rounded = (u + 0x7fff + ((u >> 16) & 1)) >> 16;  // round to nearest even
    return std::isnan(f) ? uint16_t((u >> 16) | 0x40) : uint16_t(rounded);
  }
};

#if defined(__FLT16_MAX__)
struct F16 {
  using Elem = _Float16;
  using Acc = float;
  static float load(_Float16 v) { return static_cast<float>(v); }
  static _Float16 store(float f) { return static_cast<_Float16>(f); }
};
#else
struct F16 {  // IEEE binary16 by bit manipulation, for compilers without _Float16
  using Elem = uint16_t;
  using Acc = float;
  static float load(uint16_t h) {
    uint32_t s = uint32_t(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0) return (s ? -1.f : 1.f) * std::ldexp(float(m), -24);
    if (e == 31) return bitsFloat(s | 0x7f800000 | (m << 13));
    return bitsFloat(s | ((e + 112) << 23) | (m << 13));
  }
  static uint16_t store(float f) {
    uint32_t u = floatBits(f), s = (u >> 16) & 0x8000;
    float a = std::fabs(f);
    if (std::isnan(f)) return uint16_t(s | 0x7e00);
    if (a >= 65520.f) return uint16_t(s | 0x7c00);
    if (a < 6.103515625e-05f) return uint16_t(s | uint32_t(std::nearbyint(a * 16777216.f)));
    uint32_t v = floatBits(a);
    uint32_t r = v + 0xfff + ((v >> 13) & 1);
    return uint16_t(s | (((r >> 23) - 112) << 10) | ((r >> 13) & 0x3ff));
  }
};
#endif

// OCP FP8 types through a decode table; encoding rounds to nearest even by search. Not a hot
// path on CPUs.
template <bool E4M3>
struct Fp8 {
  using Elem = uint8_t;
  using Acc = float;
  static const float* table() {
    static const auto t = [] {
      struct T {
        float v[256];
      } t;
      const int mbits = E4M3 ? 3 : 2, bias = E4M3 ? 7 : 15;
      for (int c = 0; c < 256; ++c) {
        int e = (c >> mbits) & (E4M3 ? 15 : 31), m = c & ((1 << mbits) - 1);
        float mag;
        if (E4M3 && (c & 0x7f) == 0x7f) mag = NAN;
        else if (!E4M3 && e == 31) mag = m ? NAN : INFINITY;
        else if (e == 0) mag = std::ldexp(float(m), 1 - bias - mbits);
        else mag = std::ldexp(float((1 << mbits) | m), e - bias - mbits);
        t.v[c] = (c & 0x80) ? -mag : mag;
      }
      return t;
    }();
    return t.v;
  }
  static float load(uint8_t v) { return table()[v]; }
  static uint8_t store(float f) {
    const float* t = table();
    uint8_t sign = std::signbit(f) ? 0x80 : 0;
    if (std::isnan(f)) return sign | 0x7f;
    float a = std::fabs(f);
    const int maxCode = E4M3 ? 0x7e : 0x7b;  // largest finite magnitude
    // Beyond max + half an ulp: e5m2 overflows to infinity, e4m3 (no infinity) to NaN.
    float over = t[maxCode] + (t[maxCode] - t[maxCode - 1]) / 2;
    if (a >= over) return sign | (E4M3 ? 0x7f : 0x7c);
    int lo = 0, hi = maxCode;  // the largest code whose value is <= a
    while (lo < hi) {
      int mid = (lo + hi + 1) / 2;
      if (t[mid] <= a) lo = mid;
      else hi = mid - 1;
    }
    int c = lo;
    if (c < maxCode && t[c] != a) {
      float mid = (t[c] + t[c + 1]) / 2;
      if (a > mid || (a == mid && (c & 1))) ++c;
    }
    return sign | uint8_t(c);
  }
};

// ---- ops on the accumulator

struct Sum {
  template <class A>
  static A apply(A a, A b) { return a + b; }
};
struct Prod {
  template <class A>
  static A apply(A a, A b) { return a * b; }
};
struct Max {
  template <class A>
  static A apply(A a, A b) { return a > b ? a : b; }
};
struct Min {
  template <class A>
  static A apply(A a, A b) { return a < b ? a : b; }
};

// Always inlined, so each multiversioned entry point below compiles it for its own target.
#define ACCL_INLINE inline __attribute__((always_inline))

template <class Type, class Op>
ACCL_INLINE void kernel(void* dstv, const void* const* srcv, int n, size_t count, int avg) {
  using E = typename Type::Elem;
  using A = typename Type::Acc;
  constexpr bool signedInt = std::is_integral<E>::value && std::is_signed<E>::value;
  // Max and min on signed integers compare the signed values, not the unsigned accumulator.
  using Work = std::conditional_t<signedInt && (std::is_same<Op, Max>::value ||
                                                std::is_same<Op, Min>::value),
                                  E, A>;
  E* dst = static_cast<E*>(dstv);
  if (n == 2 && !avg) {  // the common case, one pass; dst may be a source (ivdep: same index)
    const E* a = static_cast<const E*>(srcv[0]);
    const E* b = static_cast<const E*>(srcv[1]);
#pragma GCC ivdep
    for (size_t i = 0; i < count; ++i)
      dst[i] = Type::store(static_cast<A>(Op::apply(static_cast<Work>(Type::load(a[i])),
                                                    static_cast<Work>(Type::load(b[i])))));
    return;
  }
  constexpr size_t kBlock = 512;  // the accumulator block stays in L1
  Work acc[kBlock];
  for (size_t i = 0; i < count; i += kBlock) {
    size_t m = std::min(kBlock, count - i);
    const E* s0 = static_cast<const E*>(srcv[0]) + i;
    for (size_t j = 0; j < m; ++j) acc[j] = static_cast<Work>(Type::load(s0[j]));
    for (int s = 1; s < n; ++s) {
      const E* sp = static_cast<const E*>(srcv[s]) + i;
      for (size_t j = 0; j < m; ++j) acc[j] = Op::apply(acc[j], static_cast<Work>(Type::load(sp[j])));
    }
    if (avg) {
      if constexpr (signedInt) {
        for (size_t j = 0; j < m; ++j) acc[j] = static_cast<Work>(static_cast<E>(acc[j]) / static_cast<E>(avg));
      } else {
        for (size_t j = 0; j < m; ++j) acc[j] = acc[j] / static_cast<Work>(avg);
      }
    }
    for (size_t j = 0; j < m; ++j) dst[i + j] = Type::store(static_cast<A>(acc[j]));
  }
}

template <class Type>
ACCL_INLINE void byOp(void* dst, const void* const* srcs, int n, size_t count, acclRedOp_t op,
                      int div) {
  switch (op) {
    case acclSum: return kernel<Type, Sum>(dst, srcs, n, count, 0);
    case acclAvg: return kernel<Type, Sum>(dst, srcs, n, count, div ? div : n);
    case acclProd: return kernel<Type, Prod>(dst, srcs, n, count, 0);
    case acclMax: return kernel<Type, Max>(dst, srcs, n, count, 0);
    case acclMin: return kernel<Type, Min>(dst, srcs, n, count, 0);
    default: ACCL_THROW(acclInvalidArgument, "op %d is not an acclRedOp_t", (int)op);
  }
}

ACCL_MULTIVERSION void reduceF16(void* d, const void* const* s, int n, size_t c, acclRedOp_t op,
                                  int div) {
  byOp<F16>(d, s, n, c, op, div);
}
ACCL_MULTIVERSION void reduceBf16(void* d, const void* const* s, int n, size_t c, acclRedOp_t op,
                                   int div) {
  byOp<Bf16>(d, s, n, c, op, div);
}
ACCL_MULTIVERSION void reduceF32(void* d, const void* const* s, int n, size_t c, acclRedOp_t op,
                                  int div) {
  byOp<Native<float>>(d, s, n, c, op, div);
}

}  // namespace

void reduce(void* dst, const void* const* srcs, int n, size_t count, acclDataType_t type,
            acclRedOp_t op, int div) {
  if (count == 0) return;
  switch (type) {
    case acclInt8: return byOp<Native<int8_t>>(dst, srcs, n, count, op, div);
    case acclUint8: return byOp<Native<uint8_t>>(dst, srcs, n, count, op, div);
    case acclInt32: return byOp<Native<int32_t>>(dst, srcs, n, count, op, div);
    case acclUint32: return byOp<Native<uint32_t>>(dst, srcs, n, count, op, div);
    case acclInt64: return byOp<Native<int64_t>>(dst, srcs, n, count, op, div);
    case acclUint64: return byOp<Native<uint64_t>>(dst, srcs, n, count, op, div);
    case acclFloat16: return reduceF16(dst, srcs, n, count, op, div);
    case acclFloat32: return reduceF32(dst, srcs, n, count, op, div);
    case acclFloat64: return byOp<Native<double>>(dst, srcs, n, count, op, div);
    case acclBfloat16: return reduceBf16(dst, srcs, n, count, op, div);
    case acclFloat8e4m3: return byOp<Fp8<true>>(dst, srcs, n, count, op, div);
    case acclFloat8e5m2: return byOp<Fp8<false>>(dst, srcs, n, count, op, div);
    default: ACCL_THROW(acclInvalidArgument, "datatype %d is not an acclDataType_t", (int)type);
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
namespace {
__attribute__((target("avx2"))) void streamLines(char* d, const char* s, size_t lines) {
  for (size_t i = 0; i < lines * 64; i += 64) {
    __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), lo);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32), hi);
  }
  _mm_sfence();  // streaming stores are weakly ordered: before the barrier or flag that follows
}
}  // namespace
#endif

void copyUncached(void* dst, const void* src, size_t bytes, size_t from) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2 && bytes >= from) {
    char* d = static_cast<char*>(dst);
    const char* s = static_cast<const char*>(src);
    size_t head = std::min(bytes, -reinterpret_cast<uintptr_t>(d) & 63);  // aligned lines only
    size_t lines = (bytes - head) / 64;
    memcpy(d, s, head);
    if (lines) streamLines(d + head, s + head, lines);  // no fence for a copy without a whole line
    memcpy(d + head + lines * 64, s + head + lines * 64, bytes - head - lines * 64);
    return;
  }
#endif
  memcpy(dst, src, bytes);
}

void copyOnce(void* dst, const void* src, size_t bytes) {
  if (bytes >= kUncachedCopyBytes) return copyUncached(dst, src, bytes, kUncachedCopyBytes);
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool erms = [] {  // enhanced rep movsb: CPUID leaf 7, EBX bit 9
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 9));
  }();
  if (erms && bytes >= kMovsbCopyBytes) {
    asm volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(bytes) : : "memory");
    return;
  }
#endif
  memcpy(dst, src, bytes);
}

}  // namespace cpu
}  // namespace accl
