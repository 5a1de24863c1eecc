// Copyright tf-fused-int8 authors. Apache 2.0.
//
// FusedInt8MaxPool's attributes, checked once for the shape function
// (ops.cc) and the kernel (max_pool_kernel.cc).
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
// zero-padding fields of *g and *padding.
absl::Status MaxPoolAttrs(const std::vector<int32_t>& ksize,
                          const std::vector<int32_t>& strides,
                          const std::vector<int32_t>& zero_paddings,
                          const std::string& padding_name, MaxPoolGeometry* g,
                          Padding* padding);

}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_TF_POOL_ATTRS_H_
