// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Depthwise row kernel, AVX2 (the avx2 and avxvnni paths): 16 channels as two
// ymm of int32, one PMADDWD + PADDD per tap and 8 channels (sign-extended
// int8 activations times the widened weights of depthwise.h: w * x exactly).
// Interior output columns run several at a time (specialized blocks for
// 3- and 5-wide filters with stride 1 or 2 that load each input column once
// for all the pixels it feeds; otherwise four pixels sharing each weight
// load), border columns one at a time over their valid taps. The epilogue is Epilogue16 (natural order).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cc/core/cpu/depthwise.h"
#include "cc/core/epilogue_avx2.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

// 16 activations (or `count` < 16, zero-filled) as two ymm of int32.
inline void Load16(const int8_t* p, int64_t count, __m256i* lo, __m256i* hi) {
  __m128i v;
  if (count >= 16) {
    v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  } else {
    alignas(16) int8_t tmp[16] = {0};
    std::memcpy(tmp, p, static_cast<size_t>(count));
    v = _mm_load_si128(reinterpret_cast<const __m128i*>(tmp));
  }
  *lo = _mm256_cvtepi8_epi32(v);
  *hi = _mm256_cvtepi8_epi32(_mm_srli_si128(v, 8));
}

struct Acc16 {
  __m256i lo, hi;
};

inline void Mac16(const int8_t* p, int64_t count, __m256i w_lo, __m256i w_hi,
                  Acc16* a) {
  __m256i x_lo, x_hi;
  Load16(p, count, &x_lo, &x_hi);
  a->lo = _mm256_add_epi32(a->lo, _mm256_madd_epi16(x_lo, w_lo));
  a->hi = _mm256_add_epi32(a->hi, _mm256_madd_epi16(x_hi, w_hi));
}

// kP adjacent interior output columns x 16 channels for a compile-time
// filter width kKw and stride kSw, dilation 1: each of the (kP - 1) * kSw +
// kKw input columns of the span is loaded once per filter row and used by
// every pixel whose window covers it (see depthwise_avx512vnni.cc).
template <int kKw, int kSw, int kP, bool kFull>
inline void InteriorBlock(const int8_t* row0, int64_t row_step, int64_t cc,
                          int64_t count, int64_t rows, const int32_t* wide,
                          int64_t pc, Acc16* acc) {
  for (int p = 0; p < kP; ++p) acc[p].lo = acc[p].hi = _mm256_setzero_si256();
  for (int64_t r = 0; r < rows; ++r) {
    const int8_t* row = row0 + r * row_step;
    const int32_t* w = wide + r * kKw * pc;
    __m256i w_lo[kKw], w_hi[kKw];
    for (int kx = 0; kx < kKw; ++kx) {
      w_lo[kx] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + kx * pc));
      w_hi[kx] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + kx * pc + 8));
    }
    constexpr int kCols = (kP - 1) * kSw + kKw;
    for (int col = 0; col < kCols; ++col) {
      __m256i x_lo, x_hi;
      Load16(row + col * cc, kFull ? 16 : count, &x_lo, &x_hi);
      for (int p = 0; p < kP; ++p) {
        const int kx = col - p * kSw;
        if (kx >= 0 && kx < kKw) {
          acc[p].lo = _mm256_add_epi32(acc[p].lo, _mm256_madd_epi16(x_lo, w_lo[kx]));
          acc[p].hi = _mm256_add_epi32(acc[p].hi, _mm256_madd_epi16(x_hi, w_hi[kx]));
        }
      }
    }
  }
}

// Interior columns [ox, ox_end) of one row: kP at a time, then one by one.
template <int kKw, int kSw, int kP, bool kFull>
void InteriorRun(const DepthwiseRowArgs& d, const int8_t* image, int64_t iy0,
                 int64_t ky0, int64_t ky1, int64_t ox, int64_t ox_end,
                 int64_t c0, int64_t count, const Epilogue256Consts& k,
                 int8_t* out_row, const int8_t* side_row) {
  const ConvGeometry& g = *d.geo;
  const int64_t cc = d.channels, pc = d.padded_c;
  const int64_t row_step = g.in_w * cc;
  const int32_t* wide = d.wide + ky0 * kKw * pc + c0;
  auto row0 = [&](int64_t x) {
    return image + ((iy0 + ky0) * g.in_w + x * kSw - g.pad_left) * cc + c0;
  };
  auto store = [&](const Acc16* acc, int64_t x, int n) {
    for (int p = 0; p < n; ++p) {
      const int64_t o = (x + p) * cc + c0;
      Epilogue16(acc[p].lo, acc[p].hi, d.scale + c0, d.bias + c0,
                 side_row != nullptr ? side_row + o : nullptr, k,
                 static_cast<int>(count), out_row + o);
    }
  };
  Acc16 acc[kP];
  for (; ox + kP <= ox_end; ox += kP) {
    InteriorBlock<kKw, kSw, kP, kFull>(row0(ox), row_step, cc, count, ky1 - ky0,
                                       wide, pc, acc);
    store(acc, ox, kP);
  }
  for (; ox < ox_end; ++ox) {
    InteriorBlock<kKw, kSw, 1, kFull>(row0(ox), row_step, cc, count, ky1 - ky0,
                                      wide, pc, acc);
    store(acc, ox, 1);
  }
}

using InteriorFn = void (*)(const DepthwiseRowArgs&, const int8_t*, int64_t,
                            int64_t, int64_t, int64_t, int64_t, int64_t,
                            int64_t, const Epilogue256Consts&, int8_t*,
                            const int8_t*);

// Specialized interior runners (full and partial 16-channel blocks) for
// dilation 1, filter width 3 or 5, stride 1 or 2; else nullptrs.
void PickInterior(const ConvGeometry& g, InteriorFn* full, InteriorFn* part) {
  *full = *part = nullptr;
  if (g.dilation_w != 1 || g.dilation_h != 1) return;
  if (g.filter_w == 3 && g.stride_w == 1) {
    *full = InteriorRun<3, 1, 3, true>;
    *part = InteriorRun<3, 1, 3, false>;
  } else if (g.filter_w == 3 && g.stride_w == 2) {
    *full = InteriorRun<3, 2, 2, true>;
    *part = InteriorRun<3, 2, 2, false>;
  } else if (g.filter_w == 5 && g.stride_w == 1) {
    *full = InteriorRun<5, 1, 2, true>;
    *part = InteriorRun<5, 1, 2, false>;
  } else if (g.filter_w == 5 && g.stride_w == 2) {
    *full = InteriorRun<5, 2, 2, true>;
    *part = InteriorRun<5, 2, 2, false>;
  }
}

}  // namespace

void DepthwiseRowsAvx2(const DepthwiseRowArgs& d) {
  const ConvGeometry& g = *d.geo;
  const int64_t cc = d.channels, pc = d.padded_c;
  const int64_t kw = g.filter_w;
  const int64_t sw = g.stride_w, dw = g.dilation_w;
  const int64_t pixel_step = sw * cc;
  const Epilogue256Consts k = MakeEpilogue256Consts(d.side_scale, d.lo, d.hi);
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
      const int64_t count = cc - c0 < 16 ? cc - c0 : 16;
      const float* scale = d.scale + c0;
      const float* bias = d.bias + c0;
      const int32_t* wide = d.wide + c0;
      int64_t ox = 0;
      while (ox < g.out_w) {
        const int64_t ix0 = ox * sw - g.pad_left;
        if (ox == d.full_begin && interior_full != nullptr) {
          (count == 16 ? interior_full : interior_part)(
              d, image, iy0, ky0, ky1, ox, d.full_end, c0, count, k, out_row,
              side_row);
          ox = d.full_end;
          continue;
        }
        if (ox >= d.full_begin && ox + 4 <= d.full_end) {
          Acc16 a[4];
          for (Acc16& x : a) x.lo = x.hi = _mm256_setzero_si256();
          for (int64_t ky = ky0; ky < ky1; ++ky) {
            // Whole window inside: ix0 >= 0, every address in the image.
            const int8_t* row =
                image + ((iy0 + ky * g.dilation_h) * g.in_w + ix0) * cc + c0;
            const int32_t* w = wide + ky * kw * pc;
            for (int64_t kx = 0; kx < kw; ++kx) {
              const __m256i w_lo = _mm256_loadu_si256(
                  reinterpret_cast<const __m256i*>(w + kx * pc));
              const __m256i w_hi = _mm256_loadu_si256(
                  reinterpret_cast<const __m256i*>(w + kx * pc + 8));
              const int8_t* p = row + kx * dw * cc;
              Mac16(p, count, w_lo, w_hi, &a[0]);
              Mac16(p + pixel_step, count, w_lo, w_hi, &a[1]);
              Mac16(p + 2 * pixel_step, count, w_lo, w_hi, &a[2]);
              Mac16(p + 3 * pixel_step, count, w_lo, w_hi, &a[3]);
            }
          }
          for (int i = 0; i < 4; ++i) {
            const int64_t o = (ox + i) * cc + c0;
            Epilogue16(a[i].lo, a[i].hi, scale, bias,
                       side_row != nullptr ? side_row + o : nullptr, k,
                       static_cast<int>(count), out_row + o);
          }
          ox += 4;
          continue;
        }
        const int64_t kx0 = d.kx_range[2 * ox], kx1 = d.kx_range[2 * ox + 1];
        Acc16 a;
        a.lo = a.hi = _mm256_setzero_si256();
        for (int64_t ky = ky0; ky < ky1; ++ky) {
          // ix0 may be negative here: form each tap's offset before adding
          // it to the pointer (no out-of-object pointer arithmetic).
          const int64_t row_off = ((iy0 + ky * g.dilation_h) * g.in_w + ix0) * cc + c0;
          const int32_t* w = wide + ky * kw * pc;
          for (int64_t kx = kx0; kx < kx1; ++kx) {
            Mac16(image + (row_off + kx * dw * cc), count,
                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + kx * pc)),
                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + kx * pc + 8)),
                  &a);
          }
        }
        const int64_t o = ox * cc + c0;
        Epilogue16(a.lo, a.hi, scale, bias,
                   side_row != nullptr ? side_row + o : nullptr, k,
                   static_cast<int>(count), out_row + o);
        ++ox;
      }
    }
  }
}

}  // namespace cpu
}  // namespace tf_fused_int8
