// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Grouped convolution (1 < groups, more than one input channel per group) on
// the GEMM paths: each group is an ordinary convolution over its own
// channels, run one group at a time through a groups == 1 kernel on
// contiguous copies (the group's input channels, its filter columns, its
// side input channels; the output is scattered back into place). Depthwise
// convolutions (one input channel per group) take depthwise.h instead.
#ifndef TF_FUSED_INT8_CC_CORE_CPU_GROUPED_H_
#define TF_FUSED_INT8_CC_CORE_CPU_GROUPED_H_

#include <cstdint>
#include <functional>

#include "cc/core/conv_params.h"

namespace tf_fused_int8 {
namespace cpu {

// Runs `run(sub, cache_key)` once per group; `sub` is a groups == 1 call
// whose buffers are the group's contiguous copies. cache_key identifies the
// group's filter for the packed-weight cache (the copy's address is reused
// for every group, so it cannot): the original filter's address plus the
// group index, distinct for every group of one filter (the filter has at
// least out_c >= groups elements).
void RunPerGroup(
    const FusedConvArgs& args, const ParallelFor& parallel_for,
    const std::function<void(const FusedConvArgs& sub, const int8_t* cache_key)>& run);

}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_GROUPED_H_
