// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Output lookup table, AVX2 (lut_kernels.h): the VPSHUFB chains of
// lut_pshufb.h on ymm, 16 VPSHUFBs per 32 bytes.
#include <immintrin.h>

#include <cstdint>

#include "cc/core/cpu/lut/lut_kernels.h"
#include "cc/core/cpu/lut/lut_pshufb.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

struct Ymm {
  using Vec = __m256i;
  // Row bytes ^ the previous row's bytes (prev may be null).
  static Vec Broadcast16(const int8_t* row, const int8_t* prev) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row));
    if (prev != nullptr) {
      v = _mm_xor_si128(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(prev)));
    }
    return _mm256_broadcastsi128_si256(v);
  }
  static Vec Splat(char b) { return _mm256_set1_epi8(b); }
  static Vec Shuffle(Vec t, Vec i) { return _mm256_shuffle_epi8(t, i); }
  static Vec SubSat(Vec a, Vec b) { return _mm256_subs_epi8(a, b); }
  static Vec Xor(Vec a, Vec b) { return _mm256_xor_si256(a, b); }
};

}  // namespace

void LutAvx2(const int8_t* lut, int8_t* data, int64_t n) {
  const PshufbLut<Ymm> table(lut);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i* p = reinterpret_cast<__m256i*>(data + i);
    _mm256_storeu_si256(p, table.LookUp(_mm256_loadu_si256(p)));
  }
  LutBytes(lut, data, i, n);
}

}  // namespace cpu
}  // namespace tf_fused_int8
