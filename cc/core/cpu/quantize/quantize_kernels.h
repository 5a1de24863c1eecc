// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Vector bodies of FusedInt8Quantize (cc/core/quantize.cc), one file per
// instruction set. Each quantizes the first elements of x, a whole number
// of its vectors, exactly as QuantizeOne does per element (x / scale with
// one IEEE division, NaN to 0, clip to [-128, 127], round to nearest even
// in MXCSR's mode) and returns how many it did; quantize.cc does the rest.
#ifndef TF_FUSED_INT8_CC_CORE_CPU_QUANTIZE_QUANTIZE_KERNELS_H_
#define TF_FUSED_INT8_CC_CORE_CPU_QUANTIZE_QUANTIZE_KERNELS_H_

#include <cstdint>

namespace tf_fused_int8 {
namespace cpu {

#if defined(__x86_64__)
int64_t QuantizeAvx2(const float* x, int64_t n, float scale, int8_t* q);
int64_t QuantizeAvx512(const float* x, int64_t n, float scale, int8_t* q);
#endif

}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_QUANTIZE_QUANTIZE_KERNELS_H_
