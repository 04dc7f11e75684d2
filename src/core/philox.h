// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): a
// counter-based generator. Ten rounds of multiply/xor scramble a 128-bit counter under a 64-bit
// key; every output is a pure function of (key, counter), so any thread on any device can
// compute draw i directly. Usable from host and device code.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define FREIGHT_HD __host__ __device__ __forceinline__
#else
#define FREIGHT_HD inline
#endif

namespace freight::philox {

inline constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
inline constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // Weyl key increments

struct U32x4 {
  uint32_t v[4];
};

FREIGHT_HD U32x4 draw(uint64_t seed, uint64_t counter) {
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(kM0) * c0;
    uint64_t p1 = uint64_t(kM1) * c2;
    uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
    uint32_t n1 = uint32_t(p1);
    uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    uint32_t n3 = uint32_t(p0);
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += kW0;
    k1 += kW1;
  }
  return {{c0, c1, c2, c3}};
}

// Uniform in [0, 1) with 24 random bits (exactly representable in float).
FREIGHT_HD float to_unit_float(uint32_t x) {
  return float(x >> 8) * (1.0f / 16777216.0f);
}
// Uniform in [0, 1) with 53 random bits, from two draws.
FREIGHT_HD double to_unit_double(uint32_t hi, uint32_t lo) {
  uint64_t bits = (uint64_t(hi) << 21) ^ uint64_t(lo >> 11);
  return double(bits & ((uint64_t(1) << 53) - 1)) * (1.0 / 9007199254740992.0);
}
// Element i of a stream that starts at counter `offset`: lane i % 4 of counter offset + i / 4.
FREIGHT_HD uint32_t element(uint64_t seed, uint64_t offset, uint64_t i) {
  return draw(seed, offset + (i >> 2)).v[i & 3];
}

}  // namespace freight::philox
