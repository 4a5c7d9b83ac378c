#include "auth.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "errors.h"

namespace accl {
namespace {

inline uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }
inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;  // little-endian hosts only, as every target of accl
}

struct State {
  uint64_t v0, v1, v2, v3;
  void round() {
    v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);
    v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;
    v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;
    v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);
  }
};

}  // namespace

void siphash128(const uint8_t key[16], const void* msg, size_t len, uint8_t out[16]) {
  const uint8_t* in = static_cast<const uint8_t*>(msg);
  uint64_t k0 = load64(key), k1 = load64(key + 8);
  State s{k0 ^ 0x736f6d6570736575ULL, k1 ^ 0x646f72616e646f6dULL ^ 0xee,
          k0 ^ 0x6c7967656e657261ULL, k1 ^ 0x7465646279746573ULL};
  size_t full = len & ~size_t(7);
  for (size_t i = 0; i < full; i += 8) {
    uint64_t m = load64(in + i);
    s.v3 ^= m;
    s.round();
    s.round();
    s.v0 ^= m;
  }
  uint64_t b = uint64_t(len) << 56;
  for (size_t i = 0; i < (len & 7); ++i) b |= uint64_t(in[full + i]) << (8 * i);
  s.v3 ^= b;
  s.round();
  s.round();
  s.v0 ^= b;
  s.v2 ^= 0xee;
  for (int i = 0; i < 4; ++i) s.round();
  uint64_t h0 = s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
  s.v1 ^= 0xdd;
  for (int i = 0; i < 4; ++i) s.round();
  uint64_t h1 = s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
  memcpy(out, &h0, 8);
  memcpy(out + 8, &h1, 8);
}

void randomBytes(void* buf, size_t n) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t r = getrandom(p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    ACCL_SYSCHECK(r, "getrandom", "");
    p += r;
    n -= r;
  }
}

}  // namespace accl
