// Emulated bfloat16 type and conversions (round to nearest even), for ../README.md.
#pragma once
#include <cstdint>
#include <cstring>
struct __nv_bfloat16 {
  uint16_t bits = 0;
};
inline __nv_bfloat16 __float2bfloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  __nv_bfloat16 r;
  if ((u & 0x7fffffff) > 0x7f800000) {
    r.bits = uint16_t((u >> 16) | 0x40);
    return r;
  }
  u += 0x7fff + ((u >> 16) & 1);  // round to nearest even
  r.bits = uint16_t(u >> 16);
  return r;
}
inline float __bfloat162float(__nv_bfloat16 b) {
  uint32_t u = uint32_t(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
