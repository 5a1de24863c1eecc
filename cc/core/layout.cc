// Copyright tf-fused-int8 authors. Apache 2.0.
#include "cc/core/layout.h"

namespace tf_fused_int8 {

void NhwcToNchwVectC(const int8_t* src, int64_t n, int64_t h, int64_t w,
                     int64_t c, int64_t vect, int8_t* dst) {
  const int64_t cp = RoundUp(c, vect);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < cp; ++ch)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) {
          const int64_t o = (((b * (cp / vect) + ch / vect) * h + y) * w + x) * vect + ch % vect;
          dst[o] = ch < c ? src[((b * h + y) * w + x) * c + ch] : int8_t{0};
        }
}

void NchwVectCToNhwc(const int8_t* src, int64_t n, int64_t padded_c, int64_t h,
                     int64_t w, int64_t vect, int64_t c, int8_t* dst) {
  for (int64_t b = 0; b < n; ++b)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x)
        for (int64_t ch = 0; ch < c; ++ch) {
          const int64_t i =
              (((b * (padded_c / vect) + ch / vect) * h + y) * w + x) * vect + ch % vect;
          dst[((b * h + y) * w + x) * c + ch] = src[i];
        }
}

void HwioToOihwVectI(const int8_t* src, int64_t kh, int64_t kw, int64_t in_c,
                     int64_t out_c, int64_t vect, int8_t* dst) {
  const int64_t ip = RoundUp(in_c, vect);
  for (int64_t o = 0; o < out_c; ++o)
    for (int64_t i = 0; i < ip; ++i)
      for (int64_t y = 0; y < kh; ++y)
        for (int64_t x = 0; x < kw; ++x) {
          const int64_t d = (((o * (ip / vect) + i / vect) * kh + y) * kw + x) * vect + i % vect;
          dst[d] = i < in_c ? src[((y * kw + x) * in_c + i) * out_c + o] : int8_t{0};
        }
}

void OihwVectIToHwio(const int8_t* src, int64_t out_c, int64_t padded_in_c,
                     int64_t kh, int64_t kw, int64_t vect, int64_t in_c,
                     int8_t* dst) {
  for (int64_t y = 0; y < kh; ++y)
    for (int64_t x = 0; x < kw; ++x)
      for (int64_t i = 0; i < in_c; ++i)
        for (int64_t o = 0; o < out_c; ++o) {
          const int64_t s =
              (((o * (padded_in_c / vect) + i / vect) * kh + y) * kw + x) * vect + i % vect;
          dst[((y * kw + x) * in_c + i) * out_c + o] = src[s];
        }
}

}  // namespace tf_fused_int8
