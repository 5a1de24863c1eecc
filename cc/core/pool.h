// Copyright tf-fused-int8 authors. Apache 2.0.
//
// int8 max and average pooling, NHWC, of a quantized model's int8
// activations (the Int8MaxPooling2D and Int8AveragePooling2D layers of
// tf_fused_int8.quantization), at the input's scale. Max pooling is exact,
// because max commutes with the monotonic quantization; average pooling
// rounds the exact average once (below).
//
// The input may first be surrounded by zeros (`zero_*`: what a preceding
// keras.layers.ZeroPadding2D adds; int8 0 is real 0), giving the padded
// input X' of (H + zero_top + zero_bottom) x (W + zero_left + zero_right).
// Then TF's MaxPool of X':
//   VALID: Ho = (H' - Kh) / Sh + 1 (H' >= Kh), no padding;
//   SAME:  Ho = ceil(H' / Sh), pad_top = max((Ho - 1) * Sh + Kh - H', 0) / 2
//          window cells outside X' are ignored (never zeros), and every
//          window holds at least one cell of X' (pad_top < Kh);
// likewise for the width.
//   max:     out[n, i, j, c] = max over the window's cells of X';
//   average: out[n, i, j, c] = round_half_to_even(S / D), S the exact sum
//            of the window's cells of X' (zero padding cells count, as
//            zeros), D their number (SAME's ignored cells do not count: a
//            border window is divided by the cells it holds, as
//            tf.nn.avg_pool and keras.layers.AveragePooling2D do). The
//            exact rational S / D is rounded once, to the nearest integer,
//            ties to even; it lies in [-128, 127], so nothing is clipped.
// Every kernel (portable, AVX2, AVX-512) gives the same bytes.
#ifndef TF_FUSED_INT8_CC_CORE_POOL_H_
#define TF_FUSED_INT8_CC_CORE_POOL_H_

#include <cstdint>
#include <string>

#include "cc/core/conv_params.h"
#include "cc/core/fused_conv.h"

namespace tf_fused_int8 {

// The geometry of both poolings.
struct PoolGeometry {
  // Inputs of ComputePoolGeometry.
  int64_t batch = 0, in_h = 0, in_w = 0, channels = 0;
  int64_t window_h = 1, window_w = 1, stride_h = 1, stride_w = 1;
  int64_t zero_top = 0, zero_bottom = 0, zero_left = 0, zero_right = 0;
  // Filled in by ComputePoolGeometry.
  int64_t out_h = 0, out_w = 0;
  int64_t pad_top = 0, pad_left = 0;  // SAME's ignored cells before X'

  int64_t InputElements() const { return batch * in_h * in_w * channels; }
  int64_t OutputElements() const { return batch * out_h * out_w * channels; }
};

// Checks the inputs (every size positive or zero as documented, windows and
// strides >= 1, VALID windows that fit X', sizes whose products fit int64)
// and fills in the output size. Returns an error message naming the bad
// argument, or an empty string. padding: kSame or kValid.
std::string ComputePoolGeometry(Padding padding, PoolGeometry* g);

// out (g.OutputElements() bytes) from x (g.InputElements() bytes); g from
// ComputePoolGeometry. On the path TF_FUSED_INT8_CPU_KERNEL forces, or
// the best this CPU has (a forced path this CPU lacks runs the portable
// loop); output rows are split over parallel_for.
void MaxPoolInt8(const int8_t* x, const PoolGeometry& g, int8_t* out,
                 const ParallelFor& parallel_for);
// On a given path (tests); an unsupported one runs the portable loop.
void MaxPoolInt8(const int8_t* x, const PoolGeometry& g, int8_t* out,
                 const ParallelFor& parallel_for, KernelPath path);

// The obvious loop over every cell of every window (the tests' reference).
void MaxPoolInt8Reference(const int8_t* x, const PoolGeometry& g,
                          int8_t* out);

// Average pooling, as MaxPoolInt8 (the same geometry and paths).
void AvgPoolInt8(const int8_t* x, const PoolGeometry& g, int8_t* out,
                 const ParallelFor& parallel_for);
void AvgPoolInt8(const int8_t* x, const PoolGeometry& g, int8_t* out,
                 const ParallelFor& parallel_for, KernelPath path);

// The obvious loop for average pooling: the window's sum and cell count in
// int64, the quotient in double rounded by std::nearbyint (exact enough:
// see pool.cc) (the tests' reference).
void AvgPoolInt8Reference(const int8_t* x, const PoolGeometry& g,
                          int8_t* out);

}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_POOL_H_
