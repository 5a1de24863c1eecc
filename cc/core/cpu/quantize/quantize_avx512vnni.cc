// Copyright tf-fused-int8 authors. Apache 2.0.
//
// FusedInt8Quantize, AVX-512 (the avx512vnni and amx paths; AVX512F and BW):
// 64 elements a step. With a reciprocal (quantize_kernels.h): each 16 lanes
// x times it, clipped, VCVTPS2DQ (MXCSR rounding, nearest even) and back to
// float; a vector with a lane near a rounding boundary, or NaN, is redone
// by the division steps, which every vector takes without one: VDIVPS, the
// NaN lanes zeroed (an ordered compare as the zeroing mask), clipped,
// VCVTPS2DQ. Four vectors' dwords go to bytes by VPACKSSDW / VPACKSSWB and
// a VPERMD (saturation never acts after the clip).
#include <immintrin.h>

#include <cstdint>

#include "cc/core/cpu/quantize/preprocess_loop.h"
#include "cc/core/cpu/quantize/quantize_kernels.h"

// GCC 12 warns about its own _mm512_undefined_* inside the intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace tf_fused_int8 {
namespace cpu {

int64_t QuantizeAvx512(const float* x, int64_t n, float scale, float recip,
                       int8_t* q) {
  const __m512 s = _mm512_set1_ps(scale);
  const __m512 lo = _mm512_set1_ps(-128.0f), hi = _mm512_set1_ps(127.0f);
  // NaN -> 0, then the clip (MAXPS / MINPS never see a NaN).
  auto clip = [&](__m512 v) {
    v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);
    return _mm512_min_ps(_mm512_max_ps(v, lo), hi);
  };
  auto divided = [&](const float* p) {
    return _mm512_cvtps_epi32(clip(_mm512_div_ps(_mm512_loadu_ps(p), s)));
  };
  const __m512 r = _mm512_set1_ps(recip);
  const __m512 near_half = _mm512_set1_ps(kNearHalf);
  // The rounded integers of 16 lanes: the product clipped (MAXPS / MINPS
  // with the constant first pass a NaN on), VCVTPS2DQ, and back to float to
  // see how far the product was from it. A lane at kNearHalf or more, or
  // NaN (the unordered compare), has its vector redone by division.
  auto product = [&](const float* p) {
    const __m512 v = _mm512_min_ps(
        hi, _mm512_max_ps(lo, _mm512_mul_ps(_mm512_loadu_ps(p), r)));
    const __m512i k = _mm512_cvtps_epi32(v);
    const __m512 off = _mm512_abs_ps(_mm512_sub_ps(v, _mm512_cvtepi32_ps(k)));
    if (__builtin_expect(_mm512_cmp_ps_mask(off, near_half, _CMP_NLT_UQ) != 0, 0)) {
      return divided(p);
    }
    return k;
  };
  // Four vectors' dwords to 64 bytes. The packs work per 128-bit lane: lane
  // L of the result holds four bytes of each vector (A's elements 4L..4L+3,
  // then B's, C's, D's), so one VPERMD gathers A's four dwords first.
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14,
                                          3, 7, 11, 15);
  auto store = [&](__m512i a0, __m512i a1, __m512i b0, __m512i b1, int8_t* out) {
    const __m512i a = _mm512_packs_epi32(a0, a1);
    const __m512i b = _mm512_packs_epi32(b0, b1);
    _mm512_storeu_si512(out, _mm512_permutexvar_epi32(order, _mm512_packs_epi16(a, b)));
  };
  int64_t i = 0;
  if (recip == 0.0f) {
    for (; i + 64 <= n; i += 64) {
      store(divided(x + i), divided(x + i + 16), divided(x + i + 32), divided(x + i + 48),
            q + i);
    }
    return i;
  }
  for (; i + 64 <= n; i += 64) {
    store(product(x + i), product(x + i + 16), product(x + i + 32), product(x + i + 48),
          q + i);
  }
  return i;
}

void PreprocessStepAvx512(PreprocessOp op, const float* v, float scalar, float* buf,
                          int64_t len) {
  PreprocessStepLoop(op, v, scalar, buf, len);
}

}  // namespace cpu
}  // namespace tf_fused_int8
