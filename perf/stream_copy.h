// The streaming-store copy that perf/copy_rates.cc and perf/slot_handoff.cc time: whole 64-byte
// lines (n a multiple of 64, d 32-byte aligned), written around the caches, then a fence.
#pragma once
#include <immintrin.h>

#include <cstddef>

__attribute__((target("avx2"))) inline void stream(char* d, const char* s, size_t n) {
  for (size_t i = 0; i < n; i += 64) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32), b);
  }
  _mm_sfence();
}
