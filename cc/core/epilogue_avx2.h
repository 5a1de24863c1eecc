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
// second (NaN stays NaN; left out by the kClampHi = false instantiations,
// which a caller may run only where UpperClampNeeded, epilogue.h, is false),
// cvtps_epi32 (RNE; NaN -> INT32_MIN), saturating packs to int8, max with
// lo. PACKSSDW works per 128-bit lane, so the int16 quadwords are put back in
// order with one VPERMQ before PACKSSWB.
#ifndef TF_FUSED_INT8_CC_CORE_EPILOGUE_AVX2_H_
#define TF_FUSED_INT8_CC_CORE_EPILOGUE_AVX2_H_

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cc/core/byte_count.h"

namespace tf_fused_int8 {
namespace {

struct Epilogue256Consts {
  __m256 c127;  // float upper bound hi (127 by default)
  __m256 side_scale;
  __m128i lo;  // int8 lower bound in every byte
  __m256i lo2;  // the same in all 32 bytes (Epilogue16x2)
  // Whether min(hi, y) must come before the conversion: false only where
  // UpperClampNeeded is false for the channels the consts serve. The
  // epilogues take it as the template argument kClampHi; the kernels
  // dispatch on it once per block or row (epilogue_avx512.h).
  bool clamp_hi = true;
};

inline Epilogue256Consts MakeEpilogue256Consts(float side_scale, int8_t lo,
                                               int8_t hi) {
  Epilogue256Consts k;
  k.c127 = _mm256_set1_ps(static_cast<float>(hi));
  k.side_scale = _mm256_set1_ps(side_scale);
  k.lo = _mm_set1_epi8(lo);
  k.lo2 = _mm256_set1_epi8(lo);
  return k;
}

// The first kN (0..15) bytes at p, zeros after them, reading only those:
// at most four plain moves (8, 4, 2 and 1 bytes, the bits of kN, at
// constant offsets).
template <int kN>
inline __m128i LoadBytesN(const int8_t* p) {
  constexpr int o4 = kN & 8, o2 = kN & 12, o1 = kN & 14;
  __m128i v = (kN & 8) ? _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))
                       : _mm_setzero_si128();
  if (kN & 4) {
    int32_t x;
    std::memcpy(&x, p + o4, 4);
    v = _mm_insert_epi32(v, x, o4 / 4);
  }
  if (kN & 2) {
    int16_t x;
    std::memcpy(&x, p + o2, 2);
    v = _mm_insert_epi16(v, x, o2 / 2);
  }
  if (kN & 1) v = _mm_insert_epi8(v, p[o1], o1);
  return v;
}

// The first kN (0..15) bytes of b to out, as LoadBytesN reads them.
template <int kN>
inline void StoreBytesN(__m128i b, int8_t* out) {
  constexpr int o4 = kN & 8, o2 = kN & 12, o1 = kN & 14;
  if (kN & 8) _mm_storel_epi64(reinterpret_cast<__m128i*>(out), b);
  if (kN & 4) {
    const int32_t x = _mm_extract_epi32(b, o4 / 4);
    std::memcpy(out + o4, &x, 4);
  }
  if (kN & 2) {
    const int16_t x = static_cast<int16_t>(_mm_extract_epi16(b, o2 / 2));
    std::memcpy(out + o2, &x, 2);
  }
  if (kN & 1) out[o1] = static_cast<int8_t>(_mm_extract_epi8(b, o1));
}

// The first `count` (1..16) bytes at p, zeros after them, reading only
// those (LoadBytesN: one to four plain moves). They went through a zeroed
// copy before (a variable-size memcpy call and a store-forwarding stall),
// except for counts that are multiples of 4: then a 56x56x72 depthwise
// layer's last 8 channels took 3x the time of its 64 others, and NASNet's
// 11-channel depthwise layers ran 13-14x slower than on avx512vnni (one Zen
// 4 thread).
// The partial counts are out of line (noinline): inlined, their 15 cases
// at every epilogue of the GEMM micro-kernels (which store 16 bytes
// almost always) made the small-K pointwise layers 4-6% slower (bench_core,
// one Zen 4 thread, avx2 forced: 112x112x16 -> 96 385-390 -> 407-430 us,
// 56x56x24 -> 144 179-180 -> 186-187; out of line 380-383 and 178). The
// kernels whose inner loops move partial vectors call LoadBytes16Inline /
// Store16Inline (the ymm depthwise kernel, LoadBytes32 / Store32: out of
// line, an 11-channel max pooling ran 1.13x slower). Both test for 16
// bytes first; LoadBytesUnder16 (one switch on the count, 1..15) is the
// rest, in line or out of line.
__attribute__((always_inline)) inline __m128i LoadBytesUnder16(const int8_t* p, int count) {
  return WithByteCount(count, [p](auto n) __attribute__((always_inline)) {
    return LoadBytesN<decltype(n)::value>(p);
  });
}

__attribute__((noinline)) inline __m128i LoadBytesUnder16OutOfLine(const int8_t* p, int count) {
  return LoadBytesUnder16(p, count);
}

inline __m128i LoadBytes16Inline(const int8_t* p, int count) {
  if (count == 16) return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return LoadBytesUnder16(p, count);
}

inline __m128i LoadBytes16(const int8_t* p, int count) {
  if (count == 16) return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return LoadBytesUnder16OutOfLine(p, count);
}

// The first `count` (1..32) bytes at p, zeros after them, reading only
// those (a 16-byte load and LoadBytes16 past 16).
inline __m256i LoadBytes32(const int8_t* p, int count) {
  if (count == 32) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if (count <= 16) return _mm256_set_m128i(_mm_setzero_si128(), LoadBytes16Inline(p, count));
  return _mm256_set_m128i(LoadBytes16Inline(p + 16, count - 16),
                          _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// The 16 side bytes of a pixel (count valid) as int32 in two ymm.
inline void LoadSide16(const int8_t* side, int count, __m256i* s0, __m256i* s1) {
  const __m128i s = LoadBytes16(side, count);
  *s0 = _mm256_cvtepi8_epi32(s);
  *s1 = _mm256_cvtepi8_epi32(_mm_srli_si128(s, 8));
}

// Stores the first `count` (1..16) bytes of b to out (StoreBytesN: one to
// four plain moves). Partial counts (StoreUnder16) out of line in Store16,
// in line in Store16Inline for the inner loops, as LoadBytes16.
__attribute__((always_inline)) inline void StoreUnder16(__m128i b, int count, int8_t* out) {
  WithByteCount(count, [b, out](auto n) __attribute__((always_inline)) {
    StoreBytesN<decltype(n)::value>(b, out);
  });
}

__attribute__((noinline)) inline void StoreUnder16OutOfLine(__m128i b, int count, int8_t* out) {
  StoreUnder16(b, count, out);
}

inline void Store16Inline(__m128i b, int count, int8_t* out) {
  if (count == 16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), b);
  } else {
    StoreUnder16(b, count, out);
  }
}

inline void Store16(__m128i b, int count, int8_t* out) {
  if (count == 16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), b);
  } else {
    StoreUnder16OutOfLine(b, count, out);
  }
}

// Stores the first `count` (1..32) bytes of b to out (as LoadBytes32).
inline void Store32(__m256i b, int count, int8_t* out) {
  if (count == 32) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), b);
  } else if (count <= 16) {
    Store16Inline(_mm256_castsi256_si128(b), count, out);
  } else {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(b));
    Store16Inline(_mm256_extracti128_si256(b, 1), count - 16, out + 16);
  }
}

// The largest |x[i]| of 16 floats, NaNs ignored (AbsMaxIgnoringNaN of
// epilogue.h, vectorized as in epilogue_avx512.h: MAXPS returns its second
// operand when either is NaN, and m never holds one).
inline float AbsMax16IgnoringNaN(const float* x) {
  const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x), abs), _mm256_setzero_ps());
  m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + 8), abs), m);
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
  return _mm_cvtss_f32(h);
}

template <bool kClampHi = true>
inline __m256 EpilogueFloat256(__m256i acc, __m256 scale, __m256 bias,
                               const __m256i* side_i32, __m256 side_scale,
                               __m256 c127) {
  __m256 y = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), scale);
  if (side_i32 != nullptr) {
    y = _mm256_fmadd_ps(_mm256_cvtepi32_ps(*side_i32), side_scale, y);
  }
  y = _mm256_add_ps(y, bias);
  return kClampHi ? _mm256_min_ps(c127, y) : y;  // NaN stays NaN
}

// One output pixel's 16 channels (a0: channels 0-7, a1: 8-15). scale/bias:
// 16 floats each. side: the pixel's 16 side bytes or nullptr. Stores
// `count` (1..16) bytes to out.
template <bool kClampHi = true>
inline void Epilogue16(__m256i a0, __m256i a1, const float* scale,
                       const float* bias, const int8_t* side,
                       const Epilogue256Consts& k, int count, int8_t* out) {
  __m256 y0, y1;
  if (side != nullptr) {
    __m256i s0, s1;
    LoadSide16(side, count, &s0, &s1);
    y0 = EpilogueFloat256<kClampHi>(a0, _mm256_loadu_ps(scale), _mm256_loadu_ps(bias), &s0, k.side_scale, k.c127);
    y1 = EpilogueFloat256<kClampHi>(a1, _mm256_loadu_ps(scale + 8), _mm256_loadu_ps(bias + 8), &s1, k.side_scale, k.c127);
  } else {
    y0 = EpilogueFloat256<kClampHi>(a0, _mm256_loadu_ps(scale), _mm256_loadu_ps(bias), nullptr, k.side_scale, k.c127);
    y1 = EpilogueFloat256<kClampHi>(a1, _mm256_loadu_ps(scale + 8), _mm256_loadu_ps(bias + 8), nullptr, k.side_scale, k.c127);
  }
  // [c0-3, c8-11 | c4-7, c12-15] -> [c0-3, c4-7 | c8-11, c12-15]
  const __m256i w = _mm256_permute4x64_epi64(
      _mm256_packs_epi32(_mm256_cvtps_epi32(y0), _mm256_cvtps_epi32(y1)), 0xD8);
  const __m128i b = _mm_max_epi8(
      _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1)),
      k.lo);
  Store16(b, count, out);
}

// Two pixels of Epilogue16 at once (a: a0/a1, b: b0/b1; the same 16
// channels, so the same scale and bias): y per pixel exactly as there, then
// one PACKSSWB for both pixels' int16 and one VPERMD, one PMAXSB. The
// saturating PACKSSDW + PACKSSWB composition is Epilogue16's, lane by lane,
// so every byte is Epilogue16's. side_a / side_b: each pixel's side bytes,
// or both nullptr. About 14 instructions a pixel instead of 16 (the GEMM's
// micro-tiles and the depthwise kernel's runs of pixels).
template <bool kClampHi = true>
inline void Epilogue16x2(__m256i a0, __m256i a1, __m256i b0, __m256i b1, const float* scale,
                         const float* bias, const int8_t* side_a, const int8_t* side_b,
                         const Epilogue256Consts& k, int count, int8_t* out_a,
                         int8_t* out_b) {
  const __m256 sc0 = _mm256_loadu_ps(scale), sc1 = _mm256_loadu_ps(scale + 8);
  const __m256 bi0 = _mm256_loadu_ps(bias), bi1 = _mm256_loadu_ps(bias + 8);
  __m256 ya0, ya1, yb0, yb1;
  if (side_a != nullptr) {
    __m256i sa0, sa1, sb0, sb1;
    LoadSide16(side_a, count, &sa0, &sa1);
    LoadSide16(side_b, count, &sb0, &sb1);
    ya0 = EpilogueFloat256<kClampHi>(a0, sc0, bi0, &sa0, k.side_scale, k.c127);
    ya1 = EpilogueFloat256<kClampHi>(a1, sc1, bi1, &sa1, k.side_scale, k.c127);
    yb0 = EpilogueFloat256<kClampHi>(b0, sc0, bi0, &sb0, k.side_scale, k.c127);
    yb1 = EpilogueFloat256<kClampHi>(b1, sc1, bi1, &sb1, k.side_scale, k.c127);
  } else {
    ya0 = EpilogueFloat256<kClampHi>(a0, sc0, bi0, nullptr, k.side_scale, k.c127);
    ya1 = EpilogueFloat256<kClampHi>(a1, sc1, bi1, nullptr, k.side_scale, k.c127);
    yb0 = EpilogueFloat256<kClampHi>(b0, sc0, bi0, nullptr, k.side_scale, k.c127);
    yb1 = EpilogueFloat256<kClampHi>(b1, sc1, bi1, nullptr, k.side_scale, k.c127);
  }
  // int16: pa = [A0-3, A8-11 | A4-7, A12-15], pb likewise; bytes: lane 0 =
  // dwords A0-3, A8-11, B0-3, B8-11, lane 1 = A4-7, A12-15, B4-7, B12-15.
  const __m256i pa = _mm256_packs_epi32(_mm256_cvtps_epi32(ya0), _mm256_cvtps_epi32(ya1));
  const __m256i pb = _mm256_packs_epi32(_mm256_cvtps_epi32(yb0), _mm256_cvtps_epi32(yb1));
  const __m256i q = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(pa, pb),
                                                _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  const __m256i r = _mm256_max_epi8(q, k.lo2);
  Store16(_mm256_castsi256_si128(r), count, out_a);
  Store16(_mm256_extracti128_si256(r, 1), count, out_b);
}

}  // namespace
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_EPILOGUE_AVX2_H_
