// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The AVX2 depthwise policy for depthwise_rows.h (Ymm2x8: 16 channels as two
// ymm of int32, PMADDWD + PADDD, pair weights for two filter rows at once)
// and its pair-weight preparation, shared by depthwise_avx2.cc (the avx2
// path's row kernel) and depthwise_avxvnni.cc (whose channels past its
// VPDPBUSD blocks run it). Include ONLY from those translation units (needs
// -mavx2 -mfma); everything lives in an anonymous namespace (see
// depthwise_rows.h).
#ifndef TF_FUSED_INT8_CC_CORE_CPU_DEPTHWISE_DEPTHWISE_YMM_H_
#define TF_FUSED_INT8_CC_CORE_CPU_DEPTHWISE_DEPTHWISE_YMM_H_

#include <immintrin.h>

#include <cstdint>

#include "cc/core/cpu/depthwise/depthwise.h"
#include "cc/core/cpu/depthwise/depthwise_rows.h"
#include "cc/core/epilogue_avx2.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {


struct Ymm2x8 {
  struct Acc {
    __m256i lo, hi;
  };
  using X = Acc;
  using W = Acc;
  using Tail = int64_t;  // valid channels, 1..16
  using Consts = Epilogue256Consts;

  static Tail MakeTail(int64_t count) { return count; }
  static Acc Zero() { return Acc{_mm256_setzero_si256(), _mm256_setzero_si256()}; }
  static Acc Add(Acc a, Acc b) {
    return Acc{_mm256_add_epi32(a.lo, b.lo), _mm256_add_epi32(a.hi, b.hi)};
  }
  // A partial block (count < 16) reads its bytes with LoadBytes16Inline
  // (epilogue_avx2.h).
  template <bool kFull>
  static X Load(const int8_t* p, Tail count) {
    const __m128i v = kFull ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))
                            : LoadBytes16Inline(p, static_cast<int>(count));
    return X{_mm256_cvtepi8_epi32(v), _mm256_cvtepi8_epi32(_mm_srli_si128(v, 8))};
  }
  // Column x of two input rows a, b as int16 pairs (a, b) per channel, the
  // same lane order as Load (lo: channels 0-7, hi: 8-15), for the pair
  // weights of kDepthwisePrepAvx2: one PMADDWD adds both rows' taps.
  template <bool kFull>
  static X LoadPair(const int8_t* a, const int8_t* b, Tail count) {
    const __m128i va = kFull ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(a))
                             : LoadBytes16Inline(a, static_cast<int>(count));
    const __m128i vb = kFull ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(b))
                             : LoadBytes16Inline(b, static_cast<int>(count));
    return X{_mm256_cvtepi8_epi16(_mm_unpacklo_epi8(va, vb)),
             _mm256_cvtepi8_epi16(_mm_unpackhi_epi8(va, vb))};
  }
  static W LoadW(const int32_t* w) {
    return W{_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)),
             _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 8))};
  }
  static void Mac(Acc* a, const X& x, const W& w) {
    a->lo = _mm256_add_epi32(a->lo, _mm256_madd_epi16(x.lo, w.lo));
    a->hi = _mm256_add_epi32(a->hi, _mm256_madd_epi16(x.hi, w.hi));
  }
  static Consts MakeConsts(const DirectRowArgs& d) {
    Consts k = MakeEpilogue256Consts(d.side_scale, d.lo, d.hi);
    k.clamp_hi = d.clamp_hi;
    return k;
  }
  static void Store(const Acc& a, const float* scale, const float* bias,
                    const int8_t* side, const Consts& k, Tail count, int8_t* out) {
    if (k.clamp_hi) {
      Epilogue16<true>(a.lo, a.hi, scale, bias, side, k, static_cast<int>(count), out);
    } else {
      Epilogue16<false>(a.lo, a.hi, scale, bias, side, k, static_cast<int>(count), out);
    }
  }
  // Two pixels, ld bytes apart (DepthwiseRowKernel::StoreRun): one
  // Epilogue16x2 instead of two Epilogue16. bench_core, one Zen 5 thread,
  // forced avx2, 11 rounds alternated, median time ratio: 112x112x32 0.91,
  // 56x56x144 0.89, 14x14x576 0.93 (3x3 stride 1: runs of 8 pixels),
  // 112x112x96 / 2 0.91, 56x56x144 / 2 0.97 (runs of 2).
  static void Store2(const Acc* a, const float* scale, const float* bias,
                     const int8_t* side, int64_t ld, const Consts& k, Tail count,
                     int8_t* out) {
    const int8_t* side_b = side != nullptr ? side + ld : nullptr;
    if (k.clamp_hi) {
      Epilogue16x2<true>(a[0].lo, a[0].hi, a[1].lo, a[1].hi, scale, bias, side, side_b, k,
                         static_cast<int>(count), out, out + ld);
    } else {
      Epilogue16x2<false>(a[0].lo, a[0].hi, a[1].lo, a[1].hi, scale, bias, side, side_b, k,
                          static_cast<int>(count), out, out + ld);
    }
  }
  // Interior block widths: 8 pixels for 3-wide stride 1 (16 accumulators,
  // more than the 16 ymm registers hold beside the weights, measured faster
  // all the same), else 2.
  // 8 against 3 (bench_core, one thread, Xeon with AMX under KVM, forced
  // avx2, best of 3 alternated): 112x112x32 255 -> 224 us, 56x56x144 292 ->
  // 267 (batch 8 2392 -> 2156), 28x28x192 90 -> 87; 14x14x576 and 7x7x960
  // unchanged; on two threads 56x56x144 152 -> 141, batch 8 1273 -> 1137.
  // 4 pixels measured slower than 3; stride 2 with 4 pixels instead of 2
  // unchanged.
  template <int kKw, int kSw>
  static constexpr int Pixels() {
    return kKw == 3 && kSw == 1 ? 8 : 2;
  }
};

// The pair weights of LoadPair (depthwise_rows.h HasLoadPair): per filter
// row ky < Kh - 1, tap kx and channel, w[ky][kx] in the low int16 and
// w[ky + 1][kx] in the high one, [Kh - 1][Kw][padded_c] int32, zero past the
// channels. Only for the geometries whose interior runs Interior (dilation
// 1, PickInterior's widths and strides) with per-tap weights.
int64_t PairBytes(const DepthwiseRowArgs& d) {
  const ConvGeometry& g = *d.geo;
  const bool interior = g.dilation_h == 1 && g.dilation_w == 1 &&
                        (((g.filter_w == 3 || g.filter_w == 5) &&
                          (g.stride_w == 1 || g.stride_w == 2)) ||
                         (g.filter_w == 7 && g.stride_w == 1));
  if (!interior || g.filter_h < 2 || d.tap_stride == 0) return 0;
  return (g.filter_h - 1) * g.filter_w * d.padded_c *
         static_cast<int64_t>(sizeof(int32_t));
}

void PairFill(const DepthwiseRowArgs& d, void* p) {
  const ConvGeometry& g = *d.geo;
  const int64_t cc = d.channels, pc = d.padded_c;
  int32_t* out = static_cast<int32_t*>(p);
  for (int64_t t = 0; t < (g.filter_h - 1) * g.filter_w; ++t) {
    const int8_t* wa = d.filter + t * cc;
    const int8_t* wb = wa + g.filter_w * cc;  // the same tap one row down
    for (int64_t c = 0; c < pc; ++c) {
      const uint32_t lo = c < cc ? static_cast<uint16_t>(static_cast<int16_t>(wa[c])) : 0u;
      const uint32_t hi = c < cc ? static_cast<uint16_t>(static_cast<int16_t>(wb[c])) : 0u;
      out[t * pc + c] = static_cast<int32_t>(lo | (hi << 16));
    }
  }
}

}  // namespace
}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_DEPTHWISE_DEPTHWISE_YMM_H_
