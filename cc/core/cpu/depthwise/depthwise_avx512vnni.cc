// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Depthwise row kernel, AVX-512 (BW/VL) + VNNI: 16 channels in one zmm of
// int32, one VPDPWSSD per tap (sign-extended int8 activations times the
// widened weights of depthwise.h: exact int32 products, accumulated
// exactly); masked loads and stores for a last block of fewer than 16
// channels. The row walk is depthwise_rows.h; the epilogue is
// Epilogue16Natural (epilogue_avx512.h).
#include <immintrin.h>

#include <cstdint>

#include "cc/core/cpu/depthwise/depthwise.h"
#include "cc/core/epilogue_avx512.h"
#include "cc/core/cpu/depthwise/depthwise_rows.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

struct Zmm16 {
  using Acc = __m512i;
  using X = __m512i;
  using W = __m512i;
  using Tail = __mmask16;
  using Consts = Epilogue512Consts;

  static Tail MakeTail(int64_t count) {
    return count >= 16 ? static_cast<__mmask16>(0xFFFF)
                       : static_cast<__mmask16>((1u << count) - 1);
  }
  static Acc Zero() { return _mm512_setzero_si512(); }
  static Acc Add(Acc a, Acc b) { return _mm512_add_epi32(a, b); }
  template <bool kFull>
  static X Load(const int8_t* p, Tail mask) {
    if (kFull) {
      return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
    return _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, p));
  }
  static W LoadW(const int32_t* w) { return _mm512_loadu_si512(w); }
  static void Mac(Acc* a, X x, W w) { *a = _mm512_dpwssd_epi32(*a, x, w); }
  static Consts MakeConsts(float side_scale, int8_t lo, int8_t hi) {
    return MakeEpilogue512Consts(side_scale, lo, hi);
  }
  static void Store(Acc a, const float* scale, const float* bias,
                    const int8_t* side, const Consts& k, Tail mask, int8_t* out) {
    Epilogue16Natural(a, scale, bias, side, k, mask, out);
  }
  // Interior block widths: 8 pixels for 3-wide stride 1 (10 loads and 24
  // VPDPWSSD per filter row, 8 chains), else 4.
  template <int kKw, int kSw>
  static constexpr int Pixels() {
    return kKw == 3 && kSw == 1 ? 8 : 4;
  }
};

}  // namespace

void DepthwiseRowsAvx512Vnni(const DepthwiseRowArgs& d) {
  DepthwiseRowKernel<Zmm16>::Rows(d);
}

}  // namespace cpu
}  // namespace tf_fused_int8
