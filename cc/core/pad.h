// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Zero padding and cropping of an int8 NHWC tensor's rows and columns in
// one pass (keras ZeroPadding2D and Cropping2D of a quantized model's
// activations: int8 0 is real 0, a crop is a slice; NASNet's reduction
// cells pad, and pad then crop by a row and a column). The same parallel-for
// as our convolutions: TF's Pad and StridedSlice shard over the intra-op
// pool, whose thread our helper holds between ops (cc/core/concat.h).
#ifndef TF_FUSED_INT8_CC_CORE_PAD_H_
#define TF_FUSED_INT8_CC_CORE_PAD_H_

#include <cstdint>

#include "cc/core/conv_params.h"

namespace tf_fused_int8 {

// Whether one padding amount is in FusedInt8Pad2D's range, |p| < 2^40: far
// beyond any tensor, and small enough that a size plus two amounts never
// overflows int64 (the op's shape function and kernel both check it).
inline bool PadAmountInRange(int64_t p) {
  return p > -(int64_t{1} << 40) && p < (int64_t{1} << 40);
}

// in: [batch, h, w, c]; pads[4] = {top, bottom, left, right}, each a number
// of zero rows / columns added on that side, or, negative, removed from it.
// out: [batch, h + top + bottom, w + left + right, c], both sizes >= 0 (the
// caller checks), out[n][y][x] = in[n][y - top][x - left] where that lies
// inside the input, else zeros. Reads only the input's bytes, writes exactly
// the output's.
void PadCropNhwc(const int8_t* in, int64_t batch, int64_t h, int64_t w, int64_t c,
                 const int64_t pads[4], int8_t* out, const ParallelFor& parallel_for);

}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_PAD_H_
