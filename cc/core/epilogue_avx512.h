// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The contract epilogue (cc/core/epilogue.h) for 64 output channels in four
// zmm accumulators. Include ONLY from translation units built with
// -mavx512f -mavx512bw (cc/core/cpu/*/*_avx512vnni.cc) and -ffp-contract=off.
// Everything here has internal linkage (anonymous namespace) so that no
// AVX-512 code can be merged into a baseline translation unit.
//
// Bit-for-bit equal to EpilogueScalar for every input:
//   y = cvtepi32_ps(acc) * scale          (VCVTDQ2PS, VMULPS: RNE, like
//                                          float(acc) * scale)
//   y = fmadd(float(side), side_scale, y)   (one rounding, like std::fma)
//   y = y + bias
//   y = min(hi, y)      VMINPS with y as the SECOND operand: a NaN y stays
//                       NaN (MINPS returns the second operand on NaN); left
//                       out by the kClampHi = false instantiations, which a
//                       caller may run only where UpperClampNeeded
//                       (epilogue.h) is false (Epilogue512Consts::clamp_hi
//                       carries that): then the cases below give the same
//                       bytes without it
//   i = cvtps_epi32(y)  round to nearest even (default MXCSR); NaN and
//                       y < -2^31 (incl. -Inf) give INT32_MIN
//   b = int8 saturate(i) (PACKSSDW + PACKSSWB: saturating, exact composition)
//   b = max(b, lo)       (PMAXSB; OutputBounds lo)
// Case by case against max(y, lo), min(y, hi), nearbyint:
//   NaN            -> INT32_MIN -> -128 -> lo                      (= lo)
//   y >= hi, +Inf  -> hi                                            (= hi)
//   lo <= y < hi   -> round(y) in [lo, hi], unchanged                (equal)
//   y < lo, -Inf   -> round(y) <= lo (lo is an integer), saturates
//                     to >= -128, max gives lo                      (= lo)
// Clipping after rounding equals clipping before because lo and hi are
// integers (as the scalar epilogue's comment notes).
//
// Lane order: the accumulators are in the packed weights' interleaved order
// (gemm_kernels.h, kFormatZmmU8): zmm j, 128-bit lane L, dword i holds channel
// 16L + 4j + i. PACKSSDW(a0, a1), PACKSSDW(a2, a3), PACKSSWB of the two put
// lane L's bytes in order [a0.L, a1.L, a2.L, a3.L] = channels 16L .. 16L+15,
// i.e. natural order: one 64-byte store, no permute. Scale and bias arrays
// are passed in the interleaved order; side input bytes are read in natural
// order and moved to it with PSHUFB (+ arithmetic shift to sign-extend).
#ifndef TF_FUSED_INT8_CC_CORE_EPILOGUE_AVX512_H_
#define TF_FUSED_INT8_CC_CORE_EPILOGUE_AVX512_H_

#include <immintrin.h>

#include <cstdint>

#include "cc/core/dword_spread.h"

namespace tf_fused_int8 {
namespace {

struct Epilogue512Consts {
  __m512 hi;  // float upper bound (127 by default)
  __m512 side_scale;
  __m512i lo;  // int8 lower bound in every byte
  __m512i side_shuffle[4];
  // Whether min(hi, y) must come before the conversion (the top of this
  // file): false only where UpperClampNeeded is false for the channels the
  // consts serve. The epilogues below take it as the template argument
  // kClampHi (a compile-time choice: a test per epilogue in the micro-tiles
  // kept about half of the gain, bench_core, one Zen 5 thread); the
  // kernels dispatch on it once per block or row.
  bool clamp_hi = true;
};

inline Epilogue512Consts MakeEpilogue512Consts(float side_scale, int8_t lo,
                                               int8_t hi) {
  Epilogue512Consts k;
  k.hi = _mm512_set1_ps(static_cast<float>(hi));
  k.side_scale = _mm512_set1_ps(side_scale);
  k.lo = _mm512_set1_epi8(lo);
  for (int j = 0; j < 4; ++j) {
    alignas(64) int8_t idx[64];
    DwordSpreadShuffle(j, /*at=*/3, /*lanes=*/4, idx);  // byte 4j+i of the lane
    k.side_shuffle[j] = _mm512_load_si512(idx);
  }
  return k;
}

// The largest |x[i]| of 64 floats, NaNs ignored (AbsMaxIgnoringNaN of
// epilogue.h, vectorized: the GEMM takes it per block and call, where the
// scalar loop cost 3-4% of 112x112x16 -> 96 on one Zen 5 thread). MAXPS
// returns its second operand when either is NaN, and m never holds one.
inline float AbsMax64IgnoringNaN(const float* x) {
  __m512 m = _mm512_setzero_ps();
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + 16 * j)), m);
  return _mm512_reduce_max_ps(m);
}

// y for one zmm of accumulators (channels in interleaved order), before
// the upper clamp (ClampHi512).
inline __m512 EpilogueFloat512(__m512i acc, __m512 scale, __m512 bias,
                               const __m512i* side_i32, __m512 side_scale) {
  __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), scale);
  if (side_i32 != nullptr) {
    y = _mm512_fmadd_ps(_mm512_cvtepi32_ps(*side_i32), side_scale, y);
  }
  return _mm512_add_ps(y, bias);
}

// min(hi, y): NaN stays NaN.
inline __m512 ClampHi512(__m512 y, const Epilogue512Consts& k) {
  return _mm512_min_ps(k.hi, y);
}

// The epilogue of 64 channels (a0..a3 in the interleaved order) as 64 int8
// bytes in natural channel order. scale/bias: 64 floats each, interleaved
// order. side: 64 side input bytes in natural order, or nullptr.
template <bool kClampHi = true>
__attribute__((always_inline)) inline __m512i Epilogue64Bytes(
    __m512i a0, __m512i a1, __m512i a2, __m512i a3, const float* scale,
    const float* bias, const __m512i* side, const Epilogue512Consts& k) {
  __m512 y0, y1, y2, y3;
  if (side != nullptr) {
    const __m512i s = *side;
    __m512i s0 = _mm512_srai_epi32(_mm512_shuffle_epi8(s, k.side_shuffle[0]), 24);
    __m512i s1 = _mm512_srai_epi32(_mm512_shuffle_epi8(s, k.side_shuffle[1]), 24);
    __m512i s2 = _mm512_srai_epi32(_mm512_shuffle_epi8(s, k.side_shuffle[2]), 24);
    __m512i s3 = _mm512_srai_epi32(_mm512_shuffle_epi8(s, k.side_shuffle[3]), 24);
    y0 = EpilogueFloat512(a0, _mm512_load_ps(scale), _mm512_load_ps(bias), &s0, k.side_scale);
    y1 = EpilogueFloat512(a1, _mm512_load_ps(scale + 16), _mm512_load_ps(bias + 16), &s1, k.side_scale);
    y2 = EpilogueFloat512(a2, _mm512_load_ps(scale + 32), _mm512_load_ps(bias + 32), &s2, k.side_scale);
    y3 = EpilogueFloat512(a3, _mm512_load_ps(scale + 48), _mm512_load_ps(bias + 48), &s3, k.side_scale);
  } else {
    y0 = EpilogueFloat512(a0, _mm512_load_ps(scale), _mm512_load_ps(bias), nullptr, k.side_scale);
    y1 = EpilogueFloat512(a1, _mm512_load_ps(scale + 16), _mm512_load_ps(bias + 16), nullptr, k.side_scale);
    y2 = EpilogueFloat512(a2, _mm512_load_ps(scale + 32), _mm512_load_ps(bias + 32), nullptr, k.side_scale);
    y3 = EpilogueFloat512(a3, _mm512_load_ps(scale + 48), _mm512_load_ps(bias + 48), nullptr, k.side_scale);
  }
  if (kClampHi) {
    y0 = ClampHi512(y0, k);
    y1 = ClampHi512(y1, k);
    y2 = ClampHi512(y2, k);
    y3 = ClampHi512(y3, k);
  }
  const __m512i i01 = _mm512_packs_epi32(_mm512_cvtps_epi32(y0), _mm512_cvtps_epi32(y1));
  const __m512i i23 = _mm512_packs_epi32(_mm512_cvtps_epi32(y2), _mm512_cvtps_epi32(y3));
  return _mm512_max_epi8(_mm512_packs_epi16(i01, i23), k.lo);
}

// Applies the epilogue to one output pixel's 64 channels (a0..a3 in the
// interleaved order) and stores the bytes selected by `mask` (natural
// channel order) to out. scale/bias: 64 floats each, interleaved order.
// side: the pixel's side input row (natural order), or nullptr.
template <bool kClampHi = true>
__attribute__((always_inline)) inline void Epilogue64(
    __m512i a0, __m512i a1, __m512i a2, __m512i a3, const float* scale,
    const float* bias, const int8_t* side, const Epilogue512Consts& k,
    __mmask64 mask, int8_t* out) {
  __m512i b;
  if (side != nullptr) {
    const __m512i s = _mm512_maskz_loadu_epi8(mask, side);
    b = Epilogue64Bytes<kClampHi>(a0, a1, a2, a3, scale, bias, &s, k);
  } else {
    b = Epilogue64Bytes<kClampHi>(a0, a1, a2, a3, scale, bias, nullptr, k);
  }
  _mm512_mask_storeu_epi8(out, mask, b);
}

// 16 output channels in natural order in one zmm (the depthwise kernel):
// scale/bias are 16 floats each (natural order, readable in full), side the
// pixel's side bytes for these channels (read under `mask`) or nullptr.
// VPMOVSDB saturates int32 to int8 exactly like the PACKSSDW + PACKSSWB
// pair above, so the case analysis at the top of this file applies as is.
// Stores the bytes selected by `mask`.
template <bool kClampHi = true>
inline void Epilogue16Natural(__m512i acc, const float* scale,
                              const float* bias, const int8_t* side,
                              const Epilogue512Consts& k, __mmask16 mask,
                              int8_t* out) {
  __m512 y;
  if (side != nullptr) {
    const __m512i s = _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, side));
    y = EpilogueFloat512(acc, _mm512_loadu_ps(scale), _mm512_loadu_ps(bias), &s,
                         k.side_scale);
  } else {
    y = EpilogueFloat512(acc, _mm512_loadu_ps(scale), _mm512_loadu_ps(bias),
                         nullptr, k.side_scale);
  }
  if (kClampHi) y = ClampHi512(y, k);
  const __m128i b = _mm_max_epi8(_mm512_maskz_cvtsepi32_epi8(mask, _mm512_cvtps_epi32(y)),
                                 _mm512_castsi512_si128(k.lo));
  _mm_mask_storeu_epi8(out, mask, b);
}

// Four rows of Epilogue16Natural at once (the GEMM's narrow blocks: 16
// channels of rows r .. r + 3, natural order): y per row as above, then
// one saturating PACKSSDW / PACKSSWB chain for the four (the composition
// saturates exactly like VPMOVSDB, see the top of this file), VPERMD from
// [lane L: rows 0-3, channels 4L..4L+3] to [row r: channels 0..15] and one
// PMAXSB; row r's 16 bytes (under `mask`) go to out + r * ldo. side: row
// 0's side bytes (rows ldo apart) or nullptr. About 8 instructions a row
// instead of 13 (MobileNetV2's 32 -> 16 and -> 24 pointwise layers).
template <bool kClampHi = true>
__attribute__((always_inline)) inline void Epilogue16x4Natural(
    __m512i a0, __m512i a1, __m512i a2, __m512i a3, const float* scale,
    const float* bias, const int8_t* side, int64_t ldo,
    const Epilogue512Consts& k, __mmask16 mask, int8_t* out) {
  const __m512 sc = _mm512_loadu_ps(scale), bi = _mm512_loadu_ps(bias);
  __m512 y[4];
  const __m512i a[4] = {a0, a1, a2, a3};
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {
    if (side != nullptr) {
      const __m512i s =
          _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, side + r * ldo));
      y[r] = EpilogueFloat512(a[r], sc, bi, &s, k.side_scale);
    } else {
      y[r] = EpilogueFloat512(a[r], sc, bi, nullptr, k.side_scale);
    }
  }
  if (kClampHi) {
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) y[r] = ClampHi512(y[r], k);
  }
  const __m512i p01 = _mm512_packs_epi32(_mm512_cvtps_epi32(y[0]), _mm512_cvtps_epi32(y[1]));
  const __m512i p23 = _mm512_packs_epi32(_mm512_cvtps_epi32(y[2]), _mm512_cvtps_epi32(y[3]));
  const __m512i rows_by_lane = _mm512_packs_epi16(p01, p23);
  const __m512i order =
      _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512i b =
      _mm512_max_epi8(_mm512_permutexvar_epi32(order, rows_by_lane), k.lo);
  _mm_mask_storeu_epi8(out, mask, _mm512_castsi512_si128(b));
  _mm_mask_storeu_epi8(out + ldo, mask, _mm512_extracti32x4_epi32(b, 1));
  _mm_mask_storeu_epi8(out + 2 * ldo, mask, _mm512_extracti32x4_epi32(b, 2));
  _mm_mask_storeu_epi8(out + 3 * ldo, mask, _mm512_extracti32x4_epi32(b, 3));
}

}  // namespace
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_EPILOGUE_AVX512_H_
