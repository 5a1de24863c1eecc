// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The attributes of FusedInt8MaxPool and FusedInt8AvgPool, checked once for
// the shape functions (ops.cc) and the kernels (pool_kernels.cc).
#ifndef TF_FUSED_INT8_CC_TF_POOL_ATTRS_H_
#define TF_FUSED_INT8_CC_TF_POOL_ATTRS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cc/core/conv_params.h"
#include "cc/core/pool.h"

namespace tf_fused_int8 {

// ksize, strides: 4 values, NHWC, 1 in the batch and channel dimensions,
// positive; zero_paddings: empty or 4 non-negative values [top, bottom,
// left, right]; padding: "SAME" or "VALID". Fills the window, stride and
// zero-padding fields of *g and *padding. Errors start with `op_name`.
absl::Status PoolAttrs(const char* op_name, const std::vector<int32_t>& ksize,
                       const std::vector<int32_t>& strides,
                       const std::vector<int32_t>& zero_paddings,
                       const std::string& padding_name, PoolGeometry* g,
                       Padding* padding);

}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_TF_POOL_ATTRS_H_
