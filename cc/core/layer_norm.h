// Copyright tf-fused-int8 authors. Apache 2.0.
//
// int8 layer normalization over the last axis (FusedInt8LayerNorm: Keras's
// LayerNormalization(axis=-1) of an int8 tensor, its output int8 at another
// scale), in one pass per row of C values q[0..C):
//
//   S1 = sum q,  S2 = sum q^2                       exact (int64)
//   D  = C * S2 - S1^2                              exact, >= 0 (C^2 times the
//                                                   variance in q units)
//   r  = float32(1 / sqrt(double(D) + double(epsilon) * (C * C)))   D > 0
//      = 0                                                          D == 0
//   t  = float32(C * q[c] - S1)                     exact for C <= 65536
//   y  = fmaf(t * r, gamma[c], beta[c])             one float32 multiply,
//                                                   one fused multiply-add
//   out[c] = clip(round_half_to_even(y), -128, 127)  NaN -> 0
//
// (C q - S1) r is (q - mean) / sqrt(var + epsilon) in q units: epsilon is
// Keras's epsilon over the input scale squared, and gamma / beta are
// Keras's gamma / output_scale and beta / output_scale. r is computed by one
// scalar function (LayerNormRowFactor) shared by every path, in IEEE double
// (each of its operations correctly rounded); the per-element operations
// are IEEE float32, so every path gives the same bits. A row with D == 0
// (all values equal) gives round(beta[c]) whatever epsilon is (0 where
// gamma[c] is infinite: 0 * Inf is NaN).
#ifndef TF_FUSED_INT8_CC_CORE_LAYER_NORM_H_
#define TF_FUSED_INT8_CC_CORE_LAYER_NORM_H_

#include <cstdint>

#include "cc/core/conv_params.h"
#include "cc/core/fused_conv.h"

namespace tf_fused_int8 {

// The largest C: C * q - S1 is then exact in float32 (|C q - S1| <= 255 C
// < 2^24) and the int32 sums of a vector body cannot overflow.
constexpr int64_t kLayerNormMaxChannels = 65536;

struct LayerNormArgs {
  const int8_t* x = nullptr;      // [rows, channels]
  const float* gamma = nullptr;   // [channels]: gamma / output_scale
  const float* beta = nullptr;    // [channels]: beta / output_scale
  float epsilon = 0.0f;           // >= 0, in input units squared
  int8_t* out = nullptr;          // [rows, channels]
  int64_t rows = 0, channels = 0;  // 1 <= channels <= kLayerNormMaxChannels
};

// r of a row from its exact sums (see the header comment).
float LayerNormRowFactor(int64_t s1, int64_t s2, int64_t channels, float epsilon);

// On the CPU path that TF_FUSED_INT8_CPU_KERNEL forces, or the best this
// CPU has; every path gives the same bits. `path`: a given one (tests); an
// unsupported one runs the baseline loop.
void RunLayerNorm(const LayerNormArgs& a, const ParallelFor& parallel_for);
void RunLayerNorm(const LayerNormArgs& a, const ParallelFor& parallel_for,
                  KernelPath path);

// One row, written the obvious way (the test's reference).
void LayerNormRowReference(const int8_t* x, int64_t channels, const float* gamma,
                           const float* beta, float epsilon, int8_t* out);

}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_LAYER_NORM_H_
