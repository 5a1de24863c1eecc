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

// A model's elementwise float32 preprocessing before its quantization
// (Keras's Rescaling: x * scale + offset; Normalization: (x - mean) /
// max(sqrt(variance), epsilon)), folded into the same pass: each step is
// one IEEE float32 operation per element, in order, with a value for every
// element (count 1) or one per channel (count = channels, the last axis:
// element i uses values[i % channels]), so the result is bit for bit what
// TF's Mul / AddV2 / Sub / RealDiv ops give step by step; then q as above.
enum class PreprocessOp { kMul, kAdd, kSub, kDiv };
struct PreprocessStep {
  PreprocessOp op = PreprocessOp::kMul;
  const float* values = nullptr;
  int64_t count = 1;  // 1 or channels
};

// q[i] = quantize(steps applied to x[i]) for i in [0, n); n a multiple of
// channels (>= 1), every step's count 1 or channels.
void PreprocessQuantizeFloatToInt8(const float* x, int64_t n, int64_t channels,
                                   const PreprocessStep* steps, int64_t num_steps,
                                   float scale, int8_t* q,
                                   const ParallelFor& parallel_for);
void PreprocessQuantizeFloatToInt8(const float* x, int64_t n, int64_t channels,
                                   const PreprocessStep* steps, int64_t num_steps,
                                   float scale, int8_t* q,
                                   const ParallelFor& parallel_for, KernelPath path);

// One element of channel `channel`, the obvious way (the test's reference).
int8_t PreprocessQuantizeOneReference(float x, int64_t channel,
                                      const PreprocessStep* steps, int64_t num_steps,
                                      float scale);

}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_QUANTIZE_H_
