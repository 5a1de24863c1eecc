// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Layout conversions between NHWC/HWIO (the CPU kernels' layout) and
// NCHW_VECT_C/OIHW_VECT_I (the GPU kernel's; the same element mapping as
// tf_fused_int8.nhwc_to_nchw_vect_c and friends, tests check both agree). The
// CPU op kernel uses them to accept NCHW_VECT_C graphs; the GPU harness and
// host emulation tests use them to feed the same data to both sides.
#ifndef TF_FUSED_INT8_CC_CORE_LAYOUT_H_
#define TF_FUSED_INT8_CC_CORE_LAYOUT_H_

#include <cstdint>

namespace tf_fused_int8 {

inline int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// [N, H, W, C] -> [N, ceil(C/v), H, W, v], channels >= C zero.
void NhwcToNchwVectC(const int8_t* src, int64_t n, int64_t h, int64_t w,
                     int64_t c, int64_t vect, int8_t* dst);
// [N, Cp/v, H, W, v] -> [N, H, W, C] (C <= Cp drops padded channels).
void NchwVectCToNhwc(const int8_t* src, int64_t n, int64_t padded_c, int64_t h,
                     int64_t w, int64_t vect, int64_t c, int8_t* dst);
// [Kh, Kw, I, O] -> [O, ceil(I/v), Kh, Kw, v], input channels >= I zero.
void HwioToOihwVectI(const int8_t* src, int64_t kh, int64_t kw, int64_t in_c,
                     int64_t out_c, int64_t vect, int8_t* dst);
// [O, Ip/v, Kh, Kw, v] -> [Kh, Kw, I, O] (I <= Ip drops padded channels).
void OihwVectIToHwio(const int8_t* src, int64_t out_c, int64_t padded_in_c,
                     int64_t kh, int64_t kw, int64_t vect, int64_t in_c,
                     int8_t* dst);

}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_LAYOUT_H_
