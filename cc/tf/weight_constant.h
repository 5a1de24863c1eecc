// Copyright tf-fused-int8 authors. Apache 2.0.
//
// FusedInt8WeightConstant: a Const (value and dtype attrs, the same output)
// whose buffer the fused int8 ops know to be immutable, so that they pin
// their packed weights to it as they do to a resource variable's buffer
// (no check of the filter bytes on every call: packed_weights.h). What
// freezing a graph makes of their variables (tf_fused_int8/_freeze.py).
//
// Why an op of its own: a kernel cannot see which node produced its input,
// and no other producer's buffer is safe to trust. A feed may wrap memory
// that the caller writes again between runs (a numpy array), an eager
// tensor may alias a numpy array, a legacy ref variable's Assign writes its
// buffer in place. This op's kernel owns its tensor, parsed from the attr
// once, hands out that same buffer on every run and never writes it; while
// the kernel lives its tensor is registered here, and IsWeightConstant
// recognizes exactly that buffer (the same TensorBuffer, not merely the
// same address).
#ifndef TF_FUSED_INT8_CC_TF_WEIGHT_CONSTANT_H_
#define TF_FUSED_INT8_CC_TF_WEIGHT_CONSTANT_H_

#include "tensorflow/core/framework/tensor.h"

namespace tf_fused_int8 {

// Whether `t` is the whole value of a live FusedInt8WeightConstant kernel.
bool IsWeightConstant(const tensorflow::Tensor& t);

}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_TF_WEIGHT_CONSTANT_H_
