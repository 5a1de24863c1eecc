// Copyright tf-fused-int8 authors. Apache 2.0.
//
// One preprocessing step of FusedInt8Quantize (cc/core/quantize.h) over a
// block of floats, the obvious loops: quantize.cc runs them as they compile
// for the x86-64 baseline (SSE2), and quantize_avx2.cc / quantize_avx512vnni.cc
// compile the same loops for their instruction sets (PreprocessStepAvx2 /
// PreprocessStepAvx512), where the compiler vectorizes them 8 and 16 wide.
// Each lane is the same IEEE float32 operation whatever the width; one loop
// per operation, so that no multiply and add can meet in one expression
// (the build has -ffp-contract=off too).
#ifndef TF_FUSED_INT8_CC_CORE_CPU_QUANTIZE_PREPROCESS_LOOP_H_
#define TF_FUSED_INT8_CC_CORE_CPU_QUANTIZE_PREPROCESS_LOOP_H_

#include <cstdint>

#include "cc/core/quantize.h"

namespace tf_fused_int8 {
namespace cpu {

// buf[i] = buf[i] OP v[i] (a per-channel step's values tiled over the
// block), or buf[i] OP scalar where v is null.
inline void PreprocessStepLoop(PreprocessOp op, const float* v, float scalar,
                               float* buf, int64_t len) {
  switch (op) {
    case PreprocessOp::kMul:
      if (v) { for (int64_t i = 0; i < len; ++i) buf[i] = buf[i] * v[i]; }
      else { for (int64_t i = 0; i < len; ++i) buf[i] = buf[i] * scalar; }
      break;
    case PreprocessOp::kAdd:
      if (v) { for (int64_t i = 0; i < len; ++i) buf[i] = buf[i] + v[i]; }
      else { for (int64_t i = 0; i < len; ++i) buf[i] = buf[i] + scalar; }
      break;
    case PreprocessOp::kSub:
      if (v) { for (int64_t i = 0; i < len; ++i) buf[i] = buf[i] - v[i]; }
      else { for (int64_t i = 0; i < len; ++i) buf[i] = buf[i] - scalar; }
      break;
    case PreprocessOp::kDiv:
      if (v) { for (int64_t i = 0; i < len; ++i) buf[i] = buf[i] / v[i]; }
      else { for (int64_t i = 0; i < len; ++i) buf[i] = buf[i] / scalar; }
      break;
  }
}

}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_QUANTIZE_PREPROCESS_LOOP_H_
