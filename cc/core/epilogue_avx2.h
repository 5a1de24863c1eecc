// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The contract epilogue (cc/core/epilogue.h) for 16 output channels in two
// ymm accumulators, natural channel order. Include ONLY from translation
// units built with -mavx2 -mfma (cc/core/cpu/*/*_avx2.cc, *_avxvnni.cc) and
// -ffp-contract=off. Everything here has internal linkage (anonymous
// namespace) so that no AVX2 code can be merged into a baseline unit.
//
// The operation sequence and its case-by-case equality with EpilogueScalar
// are those of epilogue_avx512.h: mul, fmadd (side), add, min(hi, y) with y
// second (NaN stays NaN), cvtps_epi32 (RNE; NaN -> INT32_MIN), saturating
// packs to int8, max with lo. PACKSSDW works per 128-bit lane, so the int16
// quadwords are put back in order with one VPERMQ before PACKSSWB.
#ifndef TF_FUSED_INT8_CC_CORE_EPILOGUE_AVX2_H_
#define TF_FUSED_INT8_CC_CORE_EPILOGUE_AVX2_H_

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace tf_fused_int8 {
namespace {

struct Epilogue256Consts {
  __m256 c127;  // float upper bound hi (127 by default)
  __m256 side_scale;
  __m128i lo;  // int8 lower bound in every byte
};

inline Epilogue256Consts MakeEpilogue256Consts(float side_scale, int8_t lo,
                                               int8_t hi) {
  Epilogue256Consts k;
  k.c127 = _mm256_set1_ps(static_cast<float>(hi));
  k.side_scale = _mm256_set1_ps(side_scale);
  k.lo = _mm_set1_epi8(lo);
  return k;
}

inline __m256 EpilogueFloat256(__m256i acc, __m256 scale, __m256 bias,
                               const __m256i* side_i32, __m256 side_scale,
                               __m256 c127) {
  __m256 y = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), scale);
  if (side_i32 != nullptr) {
    y = _mm256_fmadd_ps(_mm256_cvtepi32_ps(*side_i32), side_scale, y);
  }
  y = _mm256_add_ps(y, bias);
  return _mm256_min_ps(c127, y);  // NaN stays NaN
}

// One output pixel's 16 channels (a0: channels 0-7, a1: 8-15). scale/bias:
// 16 floats each. side: the pixel's 16 side bytes or nullptr. Stores
// `count` (1..16) bytes to out.
inline void Epilogue16(__m256i a0, __m256i a1, const float* scale,
                       const float* bias, const int8_t* side,
                       const Epilogue256Consts& k, int count, int8_t* out) {
  __m256 y0, y1;
  if (side != nullptr) {
    __m128i s;
    if (count == 16) {
      s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(side));
    } else {
      alignas(16) int8_t tmp[16] = {0};
      std::memcpy(tmp, side, static_cast<size_t>(count));
      s = _mm_load_si128(reinterpret_cast<const __m128i*>(tmp));
    }
    const __m256i s0 = _mm256_cvtepi8_epi32(s);
    const __m256i s1 = _mm256_cvtepi8_epi32(_mm_srli_si128(s, 8));
    y0 = EpilogueFloat256(a0, _mm256_loadu_ps(scale), _mm256_loadu_ps(bias), &s0, k.side_scale, k.c127);
    y1 = EpilogueFloat256(a1, _mm256_loadu_ps(scale + 8), _mm256_loadu_ps(bias + 8), &s1, k.side_scale, k.c127);
  } else {
    y0 = EpilogueFloat256(a0, _mm256_loadu_ps(scale), _mm256_loadu_ps(bias), nullptr, k.side_scale, k.c127);
    y1 = EpilogueFloat256(a1, _mm256_loadu_ps(scale + 8), _mm256_loadu_ps(bias + 8), nullptr, k.side_scale, k.c127);
  }
  // [c0-3, c8-11 | c4-7, c12-15] -> [c0-3, c4-7 | c8-11, c12-15]
  const __m256i w = _mm256_permute4x64_epi64(
      _mm256_packs_epi32(_mm256_cvtps_epi32(y0), _mm256_cvtps_epi32(y1)), 0xD8);
  const __m128i b = _mm_max_epi8(
      _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1)),
      k.lo);
  if (count == 16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), b);
  } else {
    alignas(16) int8_t tmp[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(tmp), b);
    std::memcpy(out, tmp, static_cast<size_t>(count));
  }
}

}  // namespace
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_EPILOGUE_AVX2_H_
