// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The contract epilogue (cc/core/epilogue.h) for 16 output channels in four
// int32x4 accumulators, natural channel order, on AArch64 Advanced SIMD.
// Include ONLY from the aarch64 instruction-set translation units
// (cc/core/cpu/*/*_neon.cc, *_dotprod.cc, *_i8mm.cc), built with
// -ffp-contract=off. Everything here has internal linkage (anonymous
// namespace) so that no code built with +dotprod / +i8mm can be merged by
// the linker into a baseline symbol.
//
// Bit-for-bit equal to EpilogueScalar for every input, step by step:
//   y = vcvtq_f32_s32(acc)      SCVTF, FPCR rounding mode (round to nearest
//                               even, the Linux default), like float(acc)
//   y = vmulq_f32(y, scale)     FMUL: one IEEE rounding, like float * float
//   y = vfmaq_f32(y, s, ss)     FMLA: y + s * ss with ONE rounding, exactly
//                               std::fma(s, ss, y) (side input only)
//   y = vaddq_f32(y, bias)      FADD, like y + bias
//   y = (y > lo) ? y : lo       FCMGT + BSL: the compare is false for a NaN
//   y = (y < hi) ? y : hi       y (lo is never NaN), so NaN -> lo, -Inf ->
//                               lo, +Inf -> hi: the scalar code's two lines,
//                               transcribed literally (no max/min, so no
//                               question about NaN or signed-zero operand
//                               order, nor about FPCR.AH)
//   i = vcvtnq_s32_f32(y)       FCVTNS: round to nearest, ties to even, like
//                               nearbyint in the default mode. FCVTNS would
//                               map NaN to 0, but y is already a finite value
//                               in [lo, hi] here, so the conversion is exact
//                               rounding of an in-range value
//   b = narrow(i)               i is in [lo, hi] within [-128, 127]: the
//                               (saturating) narrowings change nothing
// The compiler may not contract the FMUL and FADD into one FMLA: every file
// that includes this is built with -ffp-contract=off, and the explicit
// intrinsics above are separate operations anyway.
#ifndef TF_FUSED_INT8_CC_CORE_EPILOGUE_NEON_H_
#define TF_FUSED_INT8_CC_CORE_EPILOGUE_NEON_H_

#if !defined(__aarch64__)
#error "epilogue_neon.h belongs to the aarch64 instruction-set translation units only"
#endif

#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#include "cc/core/byte_count.h"

namespace tf_fused_int8 {
namespace {

struct EpilogueNeonConsts {
  float32x4_t lo, hi;  // float output bounds (OutputBounds)
  float32x4_t side_scale;
};

inline EpilogueNeonConsts MakeEpilogueNeonConsts(float side_scale, int8_t lo,
                                                 int8_t hi) {
  EpilogueNeonConsts k;
  k.lo = vdupq_n_f32(static_cast<float>(lo));
  k.hi = vdupq_n_f32(static_cast<float>(hi));
  k.side_scale = vdupq_n_f32(side_scale);
  return k;
}

// Four channels: the int32 results, clipped to [lo, hi] and rounded.
inline int32x4_t EpilogueNeon4(int32x4_t acc, float32x4_t scale,
                               float32x4_t bias, const int32x4_t* side,
                               const EpilogueNeonConsts& k) {
  float32x4_t y = vmulq_f32(vcvtq_f32_s32(acc), scale);
  if (side != nullptr) y = vfmaq_f32(y, vcvtq_f32_s32(*side), k.side_scale);
  y = vaddq_f32(y, bias);
  y = vbslq_f32(vcgtq_f32(y, k.lo), y, k.lo);  // NaN -> lo
  y = vbslq_f32(vcltq_f32(y, k.hi), y, k.hi);
  return vcvtnq_s32_f32(y);
}

// The first kN (0..15) bytes at p, zeros after them, reading only those:
// at most four plain moves (8, 4, 2 and 1 bytes, the bits of kN, at
// constant offsets), as epilogue_avx2.h's LoadBytesN.
template <int kN>
inline int8x16_t LoadBytesNeonN(const int8_t* p) {
  constexpr int o4 = kN & 8, o2 = kN & 12, o1 = kN & 14;
  int8x16_t v = vdupq_n_s8(0);
  if (kN & 8) v = vcombine_s8(vld1_s8(p), vdup_n_s8(0));
  if (kN & 4) {
    int32_t x;
    std::memcpy(&x, p + o4, 4);
    v = vreinterpretq_s8_s32(vsetq_lane_s32(x, vreinterpretq_s32_s8(v), o4 / 4));
  }
  if (kN & 2) {
    int16_t x;
    std::memcpy(&x, p + o2, 2);
    v = vreinterpretq_s8_s16(vsetq_lane_s16(x, vreinterpretq_s16_s8(v), o2 / 2));
  }
  if (kN & 1) v = vsetq_lane_s8(p[o1], v, o1);
  return v;
}

// The first kN (0..15) bytes of b to out, as LoadBytesNeonN reads them.
template <int kN>
inline void StoreBytesNeonN(int8x16_t b, int8_t* out) {
  constexpr int o4 = kN & 8, o2 = kN & 12, o1 = kN & 14;
  if (kN & 8) vst1_s8(out, vget_low_s8(b));
  if (kN & 4) {
    const int32_t x = vgetq_lane_s32(vreinterpretq_s32_s8(b), o4 / 4);
    std::memcpy(out + o4, &x, 4);
  }
  if (kN & 2) {
    const int16_t x = vgetq_lane_s16(vreinterpretq_s16_s8(b), o2 / 2);
    std::memcpy(out + o2, &x, 2);
  }
  if (kN & 1) out[o1] = vgetq_lane_s8(b, o1);
}

// The first `count` (1..16) bytes at p, zeros after them, reading only
// those (LoadBytesNeonN: one to four plain moves). Counts other than 4, 8
// and 12 went through a zeroed copy before (a variable-size memcpy call:
// through it, the AVX2 kernels' 8-channel remainders took 3x the time of
// their 64 other channels on the same layer, and NASNet's 11-channel
// depthwise layers 13-14x the avx512vnni path's; epilogue_avx2.h
// LoadBytes16; not measured on an ARM CPU). LoadBytesNeonUnder16: counts
// 1..15, through one switch.
__attribute__((always_inline)) inline int8x16_t LoadBytesNeonUnder16(const int8_t* p, int count) {
  return WithByteCount(count, [p](auto n) __attribute__((always_inline)) {
    return LoadBytesNeonN<decltype(n)::value>(p);
  });
}

__attribute__((noinline)) inline int8x16_t LoadBytesNeonUnder16OutOfLine(const int8_t* p,
                                                                        int count) {
  return LoadBytesNeonUnder16(p, count);
}

// The partial counts out of line, as epilogue_avx2.h's LoadBytes16: its
// 15 cases inlined at every epilogue of the GEMM micro-kernels, which
// store 16 bytes almost always, made AVX2's small-K pointwise layers 4-6%
// slower; the same split here (not measured on an ARM CPU). Inner loops
// that move partial vectors per tap (depthwise_neon.cc) call
// LoadBytesNeon16Inline.
inline int8x16_t LoadBytesNeon16(const int8_t* p, int count) {
  if (count == 16) return vld1q_s8(p);
  return LoadBytesNeonUnder16OutOfLine(p, count);
}

inline int8x16_t LoadBytesNeon16Inline(const int8_t* p, int count) {
  if (count == 16) return vld1q_s8(p);
  return LoadBytesNeonUnder16(p, count);
}

// Stores the first `count` (1..16) bytes of b to out (StoreBytesNeonN),
// partial counts out of line as LoadBytesNeon16.
__attribute__((noinline)) inline void StoreBytesNeonUnder16OutOfLine(int8x16_t b, int count,
                                                                    int8_t* out) {
  WithByteCount(count, [b, out](auto n) __attribute__((always_inline)) {
    StoreBytesNeonN<decltype(n)::value>(b, out);
  });
}

inline void StoreBytesNeon16(int8x16_t b, int count, int8_t* out) {
  if (count == 16) {
    vst1q_s8(out, b);
  } else {
    StoreBytesNeonUnder16OutOfLine(b, count, out);
  }
}

// One output pixel's 16 channels (a[j]: channels 4j .. 4j + 3). scale and
// bias: 16 floats each, readable in full. side: the pixel's side input
// bytes for these channels (`count` of them are read) or nullptr. Stores
// `count` (1..16) bytes to out.
inline void EpilogueNeon16(const int32x4_t a[4], const float* scale,
                           const float* bias, const int8_t* side,
                           const EpilogueNeonConsts& k, int count,
                           int8_t* out) {
  int32x4_t r[4];
  if (side != nullptr) {
    const int8x16_t s = LoadBytesNeon16(side, count >= 16 ? 16 : count);
    const int16x8_t s_lo = vmovl_s8(vget_low_s8(s));
    const int16x8_t s_hi = vmovl_high_s8(s);
    const int32x4_t si[4] = {vmovl_s16(vget_low_s16(s_lo)), vmovl_high_s16(s_lo),
                             vmovl_s16(vget_low_s16(s_hi)), vmovl_high_s16(s_hi)};
    for (int j = 0; j < 4; ++j) {
      r[j] = EpilogueNeon4(a[j], vld1q_f32(scale + 4 * j),
                           vld1q_f32(bias + 4 * j), &si[j], k);
    }
  } else {
    for (int j = 0; j < 4; ++j) {
      r[j] = EpilogueNeon4(a[j], vld1q_f32(scale + 4 * j),
                           vld1q_f32(bias + 4 * j), nullptr, k);
    }
  }
  const int16x8_t h0 = vqmovn_high_s32(vqmovn_s32(r[0]), r[1]);
  const int16x8_t h1 = vqmovn_high_s32(vqmovn_s32(r[2]), r[3]);
  const int8x16_t b = vqmovn_high_s16(vqmovn_s16(h0), h1);
  StoreBytesNeon16(b, count >= 16 ? 16 : count, out);
}

}  // namespace
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_EPILOGUE_NEON_H_
