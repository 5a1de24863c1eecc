// Copyright tf-fused-int8 authors. Apache 2.0.
//
// acc plus the four u8 x s8 products of each dword lane (VPDPBUSD's
// arithmetic) from AVX2 instructions, exact for every byte: each lane's
// bytes 0 and 2 and its bytes 1 and 3 widened to int16 (the u8 operand
// zero-extended, the s8 one sign-extended), VPMADDWD summing each pair's two
// products (at most 2 * 255 * 128 in magnitude), both sums added to acc
// (int32, wrapping as VPDPBUSD adds). Eight instructions where VPMADDUBSW +
// VPMADDWD by ones + VPADDD take three, but those saturate past 32767 in an
// int16 pair sum, so they are exact on bytes in [0, 127] only.
//
// Used by the avx2 depthwise blocks on the flipped form of any input
// (depthwise_avx2.cc) and by the emulated avxvnni build (avxvnni_dot.h).
// Include ONLY from translation units built with -mavx2; internal linkage.
#ifndef TF_FUSED_INT8_CC_CORE_CPU_DOT_U8S8_AVX2_H_
#define TF_FUSED_INT8_CC_CORE_CPU_DOT_U8S8_AVX2_H_

#include <immintrin.h>

namespace tf_fused_int8 {
namespace cpu {
namespace {

inline __m256i DotU8S8Widened(__m256i acc, __m256i u8, __m256i s8) {
  const __m256i u_even = _mm256_and_si256(u8, _mm256_set1_epi16(0x00FF));
  const __m256i u_odd = _mm256_srli_epi16(u8, 8);
  const __m256i s_even = _mm256_srai_epi16(_mm256_slli_epi16(s8, 8), 8);
  const __m256i s_odd = _mm256_srai_epi16(s8, 8);
  return _mm256_add_epi32(_mm256_add_epi32(acc, _mm256_madd_epi16(u_even, s_even)),
                          _mm256_madd_epi16(u_odd, s_odd));
}

}  // namespace
}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_DOT_U8S8_AVX2_H_
