// Copyright tf-fused-int8 authors. Apache 2.0.
//
// VPDPBUSD, VEX-encoded (AVX-VNNI), for the *_avxvnni.cc kernels: acc plus
// the four u8 x s8 products of each dword lane, in int32 (wrapping, as the
// instruction adds).
//
// In the build of core_test_emulated (BUILD: the *_avxvnni.cc files built
// with AVX2 only and TF_FUSED_INT8_EMULATED_ISAS) the same sums
// come from AVX2 instructions, so that every other instruction of the
// avxvnni kernels is tested bit for bit on CPUs without AVX-VNNI (AMD
// before Zen 5, Intel server cores before Sierra Forest; QEMU's TCG has no
// AVX-VNNI either, 10.0 tried): DotU8S8Widened (dot_u8s8_avx2.h). Never
// in the op library: only that test's build defines the macro.
//
// Include ONLY from the *_avxvnni.cc files (needs -mavx2, and -mavxvnni
// unless emulated); internal linkage.
#ifndef TF_FUSED_INT8_CC_CORE_CPU_AVXVNNI_DOT_H_
#define TF_FUSED_INT8_CC_CORE_CPU_AVXVNNI_DOT_H_

#include <immintrin.h>

#include "cc/core/cpu/dot_u8s8_avx2.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

inline __m256i DpbusdAvx(__m256i acc, __m256i u8, __m256i s8) {
#if defined(TF_FUSED_INT8_EMULATED_ISAS)
  return DotU8S8Widened(acc, u8, s8);
#else
  return _mm256_dpbusd_avx_epi32(acc, u8, s8);
#endif
}

}  // namespace
}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_AVXVNNI_DOT_H_
