// Proof of the unique id's secret without sending it: a challenge and response keyed with
// SipHash-2-4 (128-bit output), a PRF made for short keyed messages such as this one.
#pragma once

#include <cstddef>
#include <cstdint>

namespace accl {

constexpr size_t kSecretBytes = 16;
constexpr size_t kNonceBytes = 16;
constexpr size_t kMacBytes = 16;

void siphash128(const uint8_t key[16], const void* msg, size_t len, uint8_t out[16]);
// Cryptographically random bytes (getrandom); throws acclSystemError if the kernel has none.
void randomBytes(void* buf, size_t n);

}  // namespace accl
