// Copyright tf-fused-int8 authors. Apache 2.0.
//
// FusedInt8Quantize, AVX2 (the avx2 and avxvnni paths): 32 elements a step.
// With a reciprocal (quantize_kernels.h): each 8 lanes x times it, clipped,
// VCVTPS2DQ (MXCSR rounding, nearest even) and back to float; a vector with
// a lane near a rounding boundary, or NaN, is redone by the division steps,
// which every vector takes without one: VDIVPS, the NaN lanes zeroed
// (VCMPPS ordered), clipped, VCVTPS2DQ. Then packed (the packs cannot
// saturate after the clip); the lane order the 256-bit packs leave is
// undone by one VPERMD.
#include <immintrin.h>

#include <cstdint>

#include "cc/core/cpu/quantize/preprocess_loop.h"
#include "cc/core/cpu/quantize/quantize_kernels.h"

namespace tf_fused_int8 {
namespace cpu {

int64_t QuantizeAvx2(const float* x, int64_t n, float scale, float recip, int8_t* q) {
  const __m256 s = _mm256_set1_ps(scale);
  const __m256 lo = _mm256_set1_ps(-128.0f), hi = _mm256_set1_ps(127.0f);
  const __m256 r = _mm256_set1_ps(recip);
  const __m256 near_half = _mm256_set1_ps(kNearHalf);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  auto clip = [&](__m256 v) {
    v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
    return _mm256_min_ps(_mm256_max_ps(v, lo), hi);
  };
  auto divided = [&](const float* p) {
    return _mm256_cvtps_epi32(clip(_mm256_div_ps(_mm256_loadu_ps(p), s)));
  };
  // The product clipped (MAXPS / MINPS with the constant first pass a NaN
  // on), VCVTPS2DQ, and back to float to see how far the product was from
  // its integer; a lane at kNearHalf or more, or NaN (the unordered
  // compare), has its vector redone by division.
  auto multiplied = [&](const float* p) {
    const __m256 v = _mm256_min_ps(
        hi, _mm256_max_ps(lo, _mm256_mul_ps(_mm256_loadu_ps(p), r)));
    const __m256i k = _mm256_cvtps_epi32(v);
    const __m256 off = _mm256_andnot_ps(sign, _mm256_sub_ps(v, _mm256_cvtepi32_ps(k)));
    if (__builtin_expect(
            _mm256_movemask_ps(_mm256_cmp_ps(off, near_half, _CMP_NLT_UQ)) != 0, 0)) {
      return divided(p);
    }
    return k;
  };
  // packs work per 128-bit lane: bytes come out as dwords 0 4 1 5 2 6 3 7.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  auto store = [&](__m256i a0, __m256i a1, __m256i b0, __m256i b1, int8_t* out) {
    const __m256i a = _mm256_packs_epi32(a0, a1);
    const __m256i b = _mm256_packs_epi32(b0, b1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                        _mm256_permutevar8x32_epi32(_mm256_packs_epi16(a, b), order));
  };
  int64_t i = 0;
  if (recip == 0.0f) {
    for (; i + 32 <= n; i += 32) {
      store(divided(x + i), divided(x + i + 8), divided(x + i + 16), divided(x + i + 24),
            q + i);
    }
    return i;
  }
  for (; i + 32 <= n; i += 32) {
    store(multiplied(x + i), multiplied(x + i + 8), multiplied(x + i + 16),
          multiplied(x + i + 24), q + i);
  }
  return i;
}

void PreprocessStepAvx2(PreprocessOp op, const float* v, float scalar, float* buf,
                        int64_t len) {
  PreprocessStepLoop(op, v, scalar, buf, len);
}

}  // namespace cpu
}  // namespace tf_fused_int8
