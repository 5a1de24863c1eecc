// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Output lookup table, AArch64 Advanced SIMD (lut_kernels.h): i = q ^ 0x80
// as an unsigned byte; TBL looks up entries 0-63 (0 for i >= 64), then TBX
// with i - 64, i - 128 and i - 192 (modulo 256) fills in each further
// quarter and leaves the other bytes as they are (their index is >= 64).
#include <arm_neon.h>

#include <cstdint>

#include "cc/core/cpu/lut/lut_kernels.h"

namespace tf_fused_int8 {
namespace cpu {

void LutNeon(const int8_t* lut, int8_t* data, int64_t n) {
  const uint8_t* t = reinterpret_cast<const uint8_t*>(lut);
  const uint8x16x4_t q0 = vld1q_u8_x4(t);
  const uint8x16x4_t q1 = vld1q_u8_x4(t + 64);
  const uint8x16x4_t q2 = vld1q_u8_x4(t + 128);
  const uint8x16x4_t q3 = vld1q_u8_x4(t + 192);
  const uint8x16_t flip = vdupq_n_u8(0x80);
  const uint8x16_t quarter = vdupq_n_u8(64);
  uint8_t* d = reinterpret_cast<uint8_t*>(data);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    uint8x16_t idx = veorq_u8(vld1q_u8(d + i), flip);
    uint8x16_t r = vqtbl4q_u8(q0, idx);
    idx = vsubq_u8(idx, quarter);
    r = vqtbx4q_u8(r, q1, idx);
    idx = vsubq_u8(idx, quarter);
    r = vqtbx4q_u8(r, q2, idx);
    idx = vsubq_u8(idx, quarter);
    r = vqtbx4q_u8(r, q3, idx);
    vst1q_u8(d + i, r);
  }
  LutBytes(lut, data, i, n);
}

}  // namespace cpu
}  // namespace tf_fused_int8
