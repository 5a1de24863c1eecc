// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Vector bodies of FusedInt8Quantize (cc/core/quantize.cc), one file per
// instruction set. Each quantizes the first elements of x, a whole number
// of its vectors, exactly as QuantizeOne does per element (x / scale with
// one IEEE division, NaN to 0, clip to [-128, 127], round to nearest even
// in MXCSR's mode) and returns how many it did; quantize.cc does the rest.
//
// recip (QuantizeReciprocal below, or 0): where it is not 0 the bodies
// multiply by it instead of dividing by scale, and divide only the vectors
// where a lane's product lies near a rounding boundary (kNearHalf); every
// lane still gets round(fl(x / scale)). VDIVPS is one 16-lane (8 on AVX2)
// division every 10-16 cycles here; the multiply, round and compare are a
// few cycles (1x224x224x3, one thread, Xeon with AMX: see quantize.cc).
//
// Why the product gives the same integer. Let q = x / scale exactly and u =
// 2^-24 (float32's unit roundoff). recip = fl(1 / scale) = (1 / scale)(1 +
// e1) and v = fl(x * recip) = q (1 + e1)(1 + e2), fl(q) = q (1 + e3), each
// |e| <= u while recip and the results are normal (a product or quotient
// below FLT_MIN is far from any boundary: both round to 0). So |v - fl(q)|
// <= |q| (3u + 3u^2 + u^3). Only |q| < 129.5 matters (beyond it both clip
// to the same end, -128 or 127, both being past 129 by the bound); there
// |v - fl(q)| < 129.5 * 3.0001 * 2^-24 < 2.32e-5. The bodies clip v to
// [-128, 127] (clipping can only bring the two closer) and round it to an
// integer k in round-to-nearest; fl(q), clipped, rounds to the same k unless
// a boundary k +- 0.5 lies within 2.32e-5 of clipped v, that is unless
// |v - k| >= 0.5 - 2.32e-5. kNearHalf = 0.5 - 2^-14 (2^-14 = 6.1e-5, over
// twice the bound) marks those lanes, and their vector is divided. (v - k
// is exact: k is 0 or within a factor of two of v.) The bounds hold in
// round-to-nearest only, so QuantizeReciprocal returns 0 in any other
// MXCSR rounding mode, and for a scale or reciprocal outside the normal
// range (FTZ / DAZ, which TF's threads set, then cannot change either side).
#ifndef TF_FUSED_INT8_CC_CORE_CPU_QUANTIZE_QUANTIZE_KERNELS_H_
#define TF_FUSED_INT8_CC_CORE_CPU_QUANTIZE_QUANTIZE_KERNELS_H_

#include <cstdint>

#include "cc/core/quantize.h"

namespace tf_fused_int8 {
namespace cpu {

constexpr float kNearHalf = 0.5f - 1.0f / 16384.0f;

// 1 / scale where the multiply-and-check above is exact, else 0 (divide).
float QuantizeReciprocal(float scale);

#if defined(__x86_64__)
int64_t QuantizeAvx2(const float* x, int64_t n, float scale, float recip, int8_t* q);
int64_t QuantizeAvx512(const float* x, int64_t n, float scale, float recip,
                       int8_t* q);
// PreprocessStepLoop (preprocess_loop.h) compiled for AVX2 / AVX-512.
void PreprocessStepAvx2(PreprocessOp op, const float* v, float scalar, float* buf,
                        int64_t len);
void PreprocessStepAvx512(PreprocessOp op, const float* v, float scalar, float* buf,
                          int64_t len);
#endif

}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_QUANTIZE_QUANTIZE_KERNELS_H_
