// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Depthwise row kernel, AVX-512 (BW/VL) + VNNI: 16 channels per zmm, one
// VPDPWSSD per tap (sign-extended int8 activations times the widened
// weights of depthwise.h: exact int32 products, accumulated exactly). Output
// columns whose window lies inside the input run in blocks: for 3- and
// 5-wide filters with stride 1 or 2 (dilation 1) a specialized block loads
// each input column of the span once for every pixel it feeds (8 pixels
// for 3x3 stride 1: 10 loads instead of 24 per filter row); otherwise four
// pixels share each weight load. Several independent accumulator chains hide
// the VPDPWSSD latency; border columns run one at a time over their valid
// taps. The epilogue is Epilogue16Natural.
#include <immintrin.h>

#include <cstdint>

#include "cc/core/cpu/depthwise.h"
#include "cc/core/epilogue_avx512.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

inline __m512i LoadActivations(const int8_t* p, __mmask16 mask) {
  return _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, p));
}

// 16 activations; kFull: all 16 lanes valid (one VPMOVSXBD from memory).
template <bool kFull>
inline __m512i Load16(const int8_t* p, __mmask16 mask) {
  if (kFull) {
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  return LoadActivations(p, mask);
}

// kP adjacent interior output columns of one row and 16 channels, for a
// compile-time filter width kKw and stride kSw with dilation 1: column
// `col` of the window span feeds pixel p through tap col - p * kSw, so
// each of the (kP - 1) * kSw + kKw input columns is loaded once per filter
// row and used by every pixel whose window covers it (instead of once per
// pixel and tap). `row0` is the first input column of the span in filter
// row ky0, `row_step` the bytes between filter rows.
template <int kKw, int kSw, int kP, bool kFull>
inline void InteriorBlock(const int8_t* row0, int64_t row_step, int64_t cc,
                          int64_t rows, const int32_t* wide, int64_t pc,
                          __mmask16 mask, __m512i* acc) {
  for (int p = 0; p < kP; ++p) acc[p] = _mm512_setzero_si512();
  for (int64_t r = 0; r < rows; ++r) {
    const int8_t* row = row0 + r * row_step;
    const int32_t* w = wide + r * kKw * pc;
    __m512i wv[kKw];
    for (int kx = 0; kx < kKw; ++kx) wv[kx] = _mm512_loadu_si512(w + kx * pc);
    constexpr int kCols = (kP - 1) * kSw + kKw;
    for (int col = 0; col < kCols; ++col) {
      const __m512i x = Load16<kFull>(row + col * cc, mask);
      for (int p = 0; p < kP; ++p) {
        const int kx = col - p * kSw;
        if (kx >= 0 && kx < kKw) acc[p] = _mm512_dpwssd_epi32(acc[p], x, wv[kx]);
      }
    }
  }
}

// Interior columns [ox, ox_end) of one row with the specialized blocks:
// kP at a time, then one at a time. Returns nothing; stores the outputs.
template <int kKw, int kSw, int kP, bool kFull>
void InteriorRun(const DepthwiseRowArgs& d, const int8_t* image, int64_t iy0,
                 int64_t ky0, int64_t ky1, int64_t ox, int64_t ox_end,
                 int64_t c0, __mmask16 mask, const Epilogue512Consts& k,
                 int8_t* out_row, const int8_t* side_row) {
  const ConvGeometry& g = *d.geo;
  const int64_t cc = d.channels, pc = d.padded_c;
  const int64_t row_step = g.in_w * cc;
  const int32_t* wide = d.wide + ky0 * kKw * pc + c0;
  auto row0 = [&](int64_t x) {
    return image + ((iy0 + ky0) * g.in_w + x * kSw - g.pad_left) * cc + c0;
  };
  auto store = [&](const __m512i* acc, int64_t x, int n) {
    for (int p = 0; p < n; ++p) {
      const int64_t o = (x + p) * cc + c0;
      Epilogue16Natural(acc[p], d.scale + c0, d.bias + c0,
                        side_row != nullptr ? side_row + o : nullptr, k, mask,
                        out_row + o);
    }
  };
  __m512i acc[kP];
  for (; ox + kP <= ox_end; ox += kP) {
    InteriorBlock<kKw, kSw, kP, kFull>(row0(ox), row_step, cc, ky1 - ky0, wide,
                                       pc, mask, acc);
    store(acc, ox, kP);
  }
  if (kP > 4 && ox + 4 <= ox_end) {  // small images: a 4-column block
    InteriorBlock<kKw, kSw, (kP > 4 ? 4 : 1), kFull>(
        row0(ox), row_step, cc, ky1 - ky0, wide, pc, mask, acc);
    store(acc, ox, 4);
    ox += 4;
  }
  for (; ox < ox_end; ++ox) {
    InteriorBlock<kKw, kSw, 1, kFull>(row0(ox), row_step, cc, ky1 - ky0, wide,
                                      pc, mask, acc);
    store(acc, ox, 1);
  }
}

using InteriorFn = void (*)(const DepthwiseRowArgs&, const int8_t*, int64_t,
                            int64_t, int64_t, int64_t, int64_t, int64_t,
                            __mmask16, const Epilogue512Consts&, int8_t*,
                            const int8_t*);

// The specialized interior runner for this geometry (full and partial
// channel blocks), or nullptrs: dilation 1, filter width 3 or 5, stride 1
// or 2 (MobileNet's depthwise layers and most others).
void PickInterior(const ConvGeometry& g, InteriorFn* full, InteriorFn* part) {
  *full = *part = nullptr;
  if (g.dilation_w != 1 || g.dilation_h != 1) return;
  if (g.filter_w == 3 && g.stride_w == 1) {
    *full = InteriorRun<3, 1, 8, true>;
    *part = InteriorRun<3, 1, 8, false>;
  } else if (g.filter_w == 3 && g.stride_w == 2) {
    *full = InteriorRun<3, 2, 4, true>;
    *part = InteriorRun<3, 2, 4, false>;
  } else if (g.filter_w == 5 && g.stride_w == 1) {
    *full = InteriorRun<5, 1, 4, true>;
    *part = InteriorRun<5, 1, 4, false>;
  } else if (g.filter_w == 5 && g.stride_w == 2) {
    *full = InteriorRun<5, 2, 4, true>;
    *part = InteriorRun<5, 2, 4, false>;
  }
}

}  // namespace

void DepthwiseRowsAvx512Vnni(const DepthwiseRowArgs& d) {
  const ConvGeometry& g = *d.geo;
  const int64_t cc = d.channels, pc = d.padded_c;
  const int64_t kw = g.filter_w;
  const int64_t sw = g.stride_w, dw = g.dilation_w;
  const int64_t pixel_step = sw * cc;  // input bytes between output columns
  const Epilogue512Consts k = MakeEpilogue512Consts(d.side_scale, d.lo, d.hi);
  InteriorFn interior_full, interior_part;
  PickInterior(g, &interior_full, &interior_part);
  for (int64_t r = d.row_begin; r < d.row_end; ++r) {
    const int64_t n = r / g.out_h, oy = r % g.out_h;
    const int64_t iy0 = oy * g.stride_h - g.pad_top;
    const int64_t ky0 = d.ky_range[2 * oy], ky1 = d.ky_range[2 * oy + 1];
    const int8_t* image = d.input + n * g.in_h * g.in_w * cc;
    int8_t* out_row = d.output + r * g.out_w * cc;
    const int8_t* side_row = d.side != nullptr ? d.side + r * g.out_w * cc : nullptr;
    for (int64_t c0 = 0; c0 < cc; c0 += 16) {
      const __mmask16 mask =
          cc - c0 >= 16 ? static_cast<__mmask16>(0xFFFF)
                        : static_cast<__mmask16>((1u << (cc - c0)) - 1);
      const float* scale = d.scale + c0;
      const float* bias = d.bias + c0;
      const int32_t* wide = d.wide + c0;
      int64_t ox = 0;
      while (ox < g.out_w) {
        const int64_t ix0 = ox * sw - g.pad_left;
        if (ox == d.full_begin && interior_full != nullptr) {
          (cc - c0 >= 16 ? interior_full : interior_part)(
              d, image, iy0, ky0, ky1, ox, d.full_end, c0, mask, k, out_row,
              side_row);
          ox = d.full_end;
          continue;
        }
        if (ox >= d.full_begin && ox + 4 <= d.full_end) {
          __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
          for (int64_t ky = ky0; ky < ky1; ++ky) {
            // Whole window inside: ix0 >= 0, every address in the image.
            const int8_t* row =
                image + ((iy0 + ky * g.dilation_h) * g.in_w + ix0) * cc + c0;
            const int32_t* w = wide + ky * kw * pc;
            for (int64_t kx = 0; kx < kw; ++kx) {
              const __m512i wv = _mm512_loadu_si512(w + kx * pc);
              const int8_t* p = row + kx * dw * cc;
              a0 = _mm512_dpwssd_epi32(a0, LoadActivations(p, mask), wv);
              a1 = _mm512_dpwssd_epi32(a1, LoadActivations(p + pixel_step, mask), wv);
              a2 = _mm512_dpwssd_epi32(a2, LoadActivations(p + 2 * pixel_step, mask), wv);
              a3 = _mm512_dpwssd_epi32(a3, LoadActivations(p + 3 * pixel_step, mask), wv);
            }
          }
          const __m512i accs[4] = {a0, a1, a2, a3};
          for (int i = 0; i < 4; ++i) {
            const int64_t o = (ox + i) * cc + c0;
            Epilogue16Natural(accs[i], scale, bias,
                              side_row != nullptr ? side_row + o : nullptr, k,
                              mask, out_row + o);
          }
          ox += 4;
          continue;
        }
        const int64_t kx0 = d.kx_range[2 * ox], kx1 = d.kx_range[2 * ox + 1];
        // Two accumulator chains (alternate filter rows) halve the
        // VPDPWSSD latency chain of a lone pixel.
        __m512i a0 = _mm512_setzero_si512(), a1 = a0;
        for (int64_t ky = ky0; ky < ky1; ++ky) {
          // ix0 may be negative here: form each tap's offset before adding
          // it to the pointer (no out-of-object pointer arithmetic).
          const int64_t row_off = ((iy0 + ky * g.dilation_h) * g.in_w + ix0) * cc + c0;
          const int32_t* w = wide + ky * kw * pc;
          __m512i& a = ((ky - ky0) & 1) ? a1 : a0;
          for (int64_t kx = kx0; kx < kx1; ++kx) {
            a = _mm512_dpwssd_epi32(
                a, LoadActivations(image + (row_off + kx * dw * cc), mask),
                _mm512_loadu_si512(w + kx * pc));
          }
        }
        a0 = _mm512_add_epi32(a0, a1);
        const int64_t o = ox * cc + c0;
        Epilogue16Natural(a0, scale, bias,
                          side_row != nullptr ? side_row + o : nullptr, k, mask,
                          out_row + o);
        ++ox;
      }
    }
  }
}

}  // namespace cpu
}  // namespace tf_fused_int8
