// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Output lookup table, AVX-512 (lut_kernels.h), the last partial vector
// under a byte mask (only that one: masked stores are slow on AMD Zen 4/5;
// with a mask on every vector VPERMI2B ran 44 GB/s on 48 KiB in L1/L2, one
// Zen 5 thread):
//  * LutAvx512Vbmi: i = q ^ 0x80 indexes the table as an unsigned byte; two
//    VPERMI2Bs look it up in the lower and the upper 128 entries (7 index
//    bits each) and the index's top bit picks one. Needs AVX512_VBMI, built
//    for this one function (target attribute) and run only where the CPU
//    reports it.
//  * LutAvx512Bw: the VPSHUFB chains of lut_pshufb.h on zmm, for AVX-512
//    VNNI CPUs without VBMI (Cascade Lake).
#include <immintrin.h>

#include <cstdint>

#include "cc/core/cpu/lut/lut_kernels.h"
#include "cc/core/cpu/lut/lut_pshufb.h"

// GCC 12 warns about its own _mm512_undefined_* inside the intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace tf_fused_int8 {
namespace cpu {
namespace {

inline __mmask64 TailMask(int64_t n) {
  return n >= 64 ? ~__mmask64{0} : ((__mmask64{1} << n) - 1);
}

// 64 int8 values looked up in the table t0..t3 (lut bytes 0-255).
__attribute__((target("avx512vbmi"))) inline __m512i LookUpVbmi(
    __m512i v, __m512i t0, __m512i t1, __m512i t2, __m512i t3) {
  const __m512i idx = _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));
  const __m512i lower = _mm512_permutex2var_epi8(t0, idx, t1);
  const __m512i upper = _mm512_permutex2var_epi8(t2, idx, t3);
  return _mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), lower, upper);
}

struct Zmm {
  using Vec = __m512i;
  // Row bytes ^ the previous row's bytes (prev may be null).
  static Vec Broadcast16(const int8_t* row, const int8_t* prev) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row));
    if (prev != nullptr) {
      v = _mm_xor_si128(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(prev)));
    }
    return _mm512_broadcast_i32x4(v);
  }
  static Vec Splat(char b) { return _mm512_set1_epi8(b); }
  static Vec Shuffle(Vec t, Vec i) { return _mm512_shuffle_epi8(t, i); }
  static Vec SubSat(Vec a, Vec b) { return _mm512_subs_epi8(a, b); }
  static Vec Xor(Vec a, Vec b) { return _mm512_xor_si512(a, b); }
};

}  // namespace

bool CpuHasAvx512Vbmi() {
  static const bool has = __builtin_cpu_supports("avx512vbmi");
  return has;
}

__attribute__((target("avx512vbmi"))) void LutAvx512Vbmi(const int8_t* lut,
                                                          int8_t* data,
                                                          int64_t n) {
  const __m512i t0 = _mm512_loadu_si512(lut);
  const __m512i t1 = _mm512_loadu_si512(lut + 64);
  const __m512i t2 = _mm512_loadu_si512(lut + 128);
  const __m512i t3 = _mm512_loadu_si512(lut + 192);
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    _mm512_storeu_si512(
        data + i, LookUpVbmi(_mm512_loadu_si512(data + i), t0, t1, t2, t3));
  }
  if (i < n) {
    const __mmask64 m = TailMask(n - i);
    _mm512_mask_storeu_epi8(
        data + i, m,
        LookUpVbmi(_mm512_maskz_loadu_epi8(m, data + i), t0, t1, t2, t3));
  }
}

void LutAvx512Bw(const int8_t* lut, int8_t* data, int64_t n) {
  const PshufbLut<Zmm> table(lut);
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    _mm512_storeu_si512(data + i, table.LookUp(_mm512_loadu_si512(data + i)));
  }
  if (i < n) {
    const __mmask64 m = TailMask(n - i);
    _mm512_mask_storeu_epi8(data + i, m,
                            table.LookUp(_mm512_maskz_loadu_epi8(m, data + i)));
  }
}

}  // namespace cpu
}  // namespace tf_fused_int8
