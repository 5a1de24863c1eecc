// Copyright tf-fused-int8 authors. Apache 2.0.
//
// THE contract epilogue. Every kernel (reference, each CPU instruction set,
// GPU) must produce exactly what EpilogueScalar produces:
//
//   y = float32(acc) * conv_input_scale[c]        (float32, round to nearest even)
//   if side input: y = fmaf(side, side_input_scale, y)   (one rounding)
//   y = y + bias[c]                               (float32)
//   out = clip(round_half_to_even(y), lo, hi)
//
// with (OutputBounds) lo = output_min, raised to max(0, output_min) for Relu,
// and hi = max(output_max, lo) (defaults -128 and 127: lo = 0 for Relu,
// -128 otherwise, hi = 127).
//
// NaN y (from NaN/Inf scales or bias) gives lo; +Inf gives hi, -Inf gives lo.
// This is what max(y, lo) then min(y, hi) does with x86 MAXPS/MINPS operand
// order, so vector kernels get it for free. Clipping before rounding is the
// same as rounding before clipping because lo and hi are integers, and it
// keeps the float-to-int conversion defined for every input.
//
// With an output lookup table (FusedConvArgs::output_lut, 256 int8 entries)
// the result is lut[out + 128] (LutScalar): the table is applied after the
// clip, to the integer out above, so every kernel that produces out exactly
// produces the looked-up value exactly (cc/core/cpu/lut/ applies it to the
// output of the fast kernels; the reference applies it per element).
//
// Compile every file that includes this with -ffp-contract=off: the compiler
// must not fuse the scale multiply with the bias add.
#ifndef TF_FUSED_INT8_CC_CORE_EPILOGUE_H_
#define TF_FUSED_INT8_CC_CORE_EPILOGUE_H_

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cc/core/conv_params.h"

namespace tf_fused_int8 {

inline float ActivationLowerBound(Activation activation) {
  return activation == Activation::kRelu ? 0.0f : -128.0f;
}

inline int8_t EpilogueScalar(int32_t acc, float scale, float bias,
                             bool has_side, int8_t side, float side_scale,
                             float lo, float hi = 127.0f) {
  float y = static_cast<float>(acc) * scale;
  if (has_side) y = std::fma(static_cast<float>(side), side_scale, y);
  y = y + bias;
  y = (y > lo) ? y : lo;  // NaN -> lo
  y = (y < hi) ? y : hi;
  return static_cast<int8_t>(std::nearbyint(y));  // default mode: half-even
}

// Whether a vector epilogue must clamp y to hi before converting it to
// int32. The x86 ones clamp with MINPS and convert with CVTPS2DQ, which
// turns a y at or above 2^31 (+Inf included) into INT32_MIN, so without the
// clamp such a y would end as lo instead of hi. The clamp changes nothing
// else: a NaN y stays NaN through it (lo either way), a y <= hi passes, and
// with hi = 127 a y in (127, 2^31) rounds to at least 127, which the int8
// saturation makes 127 = hi. So a kernel may leave it out when hi == 127 and
// every y is below 2^31, which holds when
//   bound = max|acc| * max|scale| + 128 * |side_scale| (with a side input)
//           + max|bias| < 2^30
// (max|...| over the channels it computes, NaNs ignored: a NaN operand
// makes y NaN, the same either way). Proof: float32(acc), the product, the
// fma and the sum each round to nearest, a relative error of at most 2^-24
// each, so |y| <= bound * (1 + 2^-24)^4 < 2^30 * 1.000001 < 2^31; |side| <=
// 128. An infinite scale, bias or side scale makes the bound infinite (clamp
// kept); so does a NaN side scale (the comparison fails). The clamp is one
// MINPS per 16 outputs (8 on ymm); the x86 GEMM micro-tiles and depthwise
// kernels (avx512vnni, avxvnni, avx2, amx) leave it out where they may
// (epilogue_avx512.h, epilogue_avx2.h). MobileNetV2 int8, batch 1, Zen 5, the step profiler, old and
// new builds alternated three times (medians per step): the 53 steps 1072
// -> 1026 us on one thread and 686 -> 622 us on two; 112x112x16 -> 96 88.6
// -> 81.1 and 52.2 -> 45.7 us, the stem 54.6 -> 51.9 and 34.7 -> 29.7.
// The amx path per block since 2026-12-05 (with its epilogue's constants
// copied out of reach of the output stores), bench_core, one AMX Xeon
// thread, batch 1: 56x56x64 -> 256 139 -> 129 us, 56x56x24 -> 144 77 ->
// 70, 14x14x64 -> 384 13.8 -> 13.0, the 7x7 stem 269 -> 249, 3x3 layers
// 0.97-1.0x; MobileNetV2's chain (bench_sequence) 0.97x on one thread.
inline bool UpperClampNeeded(int32_t hi, double max_abs_acc,
                             float max_abs_scale, float max_abs_bias,
                             bool has_side, float side_scale) {
  if (hi != 127) return true;
  const double bound =
      max_abs_acc * static_cast<double>(max_abs_scale) +
      (has_side ? 128.0 * std::fabs(static_cast<double>(side_scale)) : 0.0) +
      static_cast<double>(max_abs_bias);
  return !(bound < 1073741824.0);  // 2^30
}

// Calls f(std::true_type{}) when clamp_hi, else f(std::false_type{}): turns
// a kernel's run-time clamp_hi (UpperClampNeeded, per call, block or
// micro-tile) into its epilogues' template argument kClampHi (f reads it as
// decltype(arg)::value). The 16-channel depthwise row kernels' per-pixel
// stores (Zmm16, Ymm2x8) keep a plain if / else instead: through the lambda
// GCC 12 laid out DepthwiseRowKernel differently and 56x56x144 ran 1.7%
// slower (bench_core, avx512vnni, ten alternated pairs).
template <typename F>
__attribute__((always_inline)) inline void WithClampHi(bool clamp_hi, const F& f) {
  if (clamp_hi) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

// The largest |x[i]| of n values, NaNs ignored (0 when n == 0 or every
// value is NaN); +-Inf gives Inf.
inline float AbsMaxIgnoringNaN(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::fabs(x[i]);
    m = v > m ? v : m;  // false for NaN
  }
  return m;
}

// The largest |acc| of a convolution with reduction depth k (int8 x int8
// products of at most 128 * 128 each).
inline double MaxAbsAcc(int64_t k) { return static_cast<double>(k) * 16384.0; }

// The output lookup table's step: lut[out + 128], or out when lut is null.
inline int8_t LutScalar(const int8_t* lut, int8_t out) {
  return lut == nullptr ? out : lut[static_cast<int32_t>(out) + 128];
}

// Applies the epilogue to `count` consecutive output channels [c0, c0+count)
// of one output pixel. acc[i] belongs to channel c0 + i; side may be null.
inline void EpilogueRow(const FusedConvArgs& a, const int32_t* acc, int64_t c0,
                        int64_t count, const int8_t* side, int8_t* out) {
  const bool has_side = a.HasSideInput();
  int32_t lo_i, hi_i;
  OutputBounds(a, &lo_i, &hi_i);
  const float lo = static_cast<float>(lo_i), hi = static_cast<float>(hi_i);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t c = c0 + i;
    const float scale = a.conv_input_scale[a.per_channel_scale ? c : 0];
    out[i] = EpilogueScalar(acc[i], scale, a.bias[c], has_side,
                            has_side ? side[i] : int8_t{0},
                            a.side_input_scale, lo, hi);
  }
}

}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_EPILOGUE_H_
