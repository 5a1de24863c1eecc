// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The TF side of the weight caches' pins (cc/core/conv_params.h WeightPin):
// a pin holds a reference to a weight buffer (a resource variable's, or a
// FusedInt8WeightConstant's) and is Held() while anything but pins still
// references that buffer: the variable, the constant's kernel, a call in
// flight. When the model is deleted or the variable is assigned (TF writes
// a new buffer while ours is shared), only the pins remain and the caches
// drop the entries they kept for it.
//
// One pin per buffer: PinBuffer hands every call the same pin object for
// the same buffer while any cache entry keeps it, so the buffer's reference
// count counts pins once. (Two pin objects would each hold a reference and
// keep each other Held() after the owner had gone.)
#ifndef TF_FUSED_INT8_CC_TF_WEIGHT_PIN_H_
#define TF_FUSED_INT8_CC_TF_WEIGHT_PIN_H_

#include <memory>

#include "cc/core/conv_params.h"
#include "tensorflow/core/framework/tensor.h"

namespace tf_fused_int8 {

// The pin of t's whole buffer (t: the variable's or the constant's tensor;
// initialized, non-empty).
std::shared_ptr<const WeightPin> PinBuffer(const tensorflow::Tensor& t);

// A pin Held() while both are (the bias and the scale of one call, two
// variables).
std::shared_ptr<const WeightPin> PinBoth(std::shared_ptr<const WeightPin> a,
                                         std::shared_ptr<const WeightPin> b);

// How many buffers PinBuffer's registry knows now, live pins or not (tests).
int64_t PinnedBufferCountForTesting();

}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_TF_WEIGHT_PIN_H_
