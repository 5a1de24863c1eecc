// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Row bodies of FusedInt8LayerNorm (cc/core/layer_norm.cc), one file per
// instruction set. A body normalizes `rows` rows of `channels` int8 values
// exactly as LayerNormOne does per element, with each row's r from
// LayerNormRowFactor (the core's one scalar function) of its exact sums.
#ifndef TF_FUSED_INT8_CC_CORE_CPU_LAYER_NORM_LAYER_NORM_KERNELS_H_
#define TF_FUSED_INT8_CC_CORE_CPU_LAYER_NORM_LAYER_NORM_KERNELS_H_

#include <cmath>
#include <cstdint>

#include "cc/core/cpu/round_int8.h"
#include "cc/core/layer_norm.h"

namespace tf_fused_int8 {
namespace cpu {

using LayerNormBody = void (*)(const int8_t* x, int64_t rows, int64_t channels,
                               const float* gamma, const float* beta,
                               float epsilon, int8_t* out);

// One element: t = C * q - S1 (exact in int32 and in float32), r the row's
// factor. Compile with -ffp-contract=off (the multiply stays a multiply).
inline int8_t LayerNormOne(int32_t t, float r, float gamma, float beta) {
  const float u = static_cast<float>(t) * r;
  return RoundClipToInt8(std::fma(u, gamma, beta));
}

#if defined(__x86_64__)
void LayerNormAvx2(const int8_t* x, int64_t rows, int64_t channels,
                   const float* gamma, const float* beta, float epsilon,
                   int8_t* out);
void LayerNormAvx512(const int8_t* x, int64_t rows, int64_t channels,
                     const float* gamma, const float* beta, float epsilon,
                     int8_t* out);
#endif

}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_LAYER_NORM_LAYER_NORM_KERNELS_H_
