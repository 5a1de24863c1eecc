// Copyright tf-fused-int8 authors. Apache 2.0.
//
// float32 -> int8 quantization of a model's input (the Quantize layer of
// tf_fused_int8.quantization), in one pass:
//
//   q = clip(round_half_to_even(x / scale), -128, 127)      NaN -> 0
//
// x / scale is IEEE float32 division (correctly rounded, as TF's RealDiv),
// so q is bit for bit what tf.round(x / scale), clipped and cast, gives;
// +-Inf and every |x / scale| > 127.5 clip to 127 / -128.
#ifndef TF_FUSED_INT8_CC_CORE_QUANTIZE_H_
#define TF_FUSED_INT8_CC_CORE_QUANTIZE_H_

#include <cstdint>

#include "cc/core/conv_params.h"
#include "cc/core/fused_conv.h"

namespace tf_fused_int8 {

// Whether `scale` can quantize: a positive, finite float32.
bool ValidQuantizeScale(float scale);

// q[i] for i in [0, n). Elements are independent: `parallel_for` splits n.
// On the CPU path that TF_FUSED_INT8_CPU_KERNEL forces, or the best this
// CPU has (the convolutions' choice); every path gives the same bits.
void QuantizeFloatToInt8(const float* x, int64_t n, float scale, int8_t* q,
                         const ParallelFor& parallel_for);
// On a given path (tests); an unsupported one runs the baseline loop.
void QuantizeFloatToInt8(const float* x, int64_t n, float scale, int8_t* q,
                         const ParallelFor& parallel_for, KernelPath path);

// The same, one element, written the obvious way (the test's reference).
int8_t QuantizeOneReference(float x, float scale);

}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_QUANTIZE_H_
