// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Grouped convolution (1 < groups, more than one input channel per group).
// Depthwise convolutions (one input channel per group) take depthwise.h.
//
//  * Narrow groups (avx512vnni): a direct kernel like the depthwise one,
//    16 output channels in the lanes of one zmm. For each block of 16 output
//    channels the input channels its groups read form a "span" of at most
//    32 consecutive channels; per tap the span is loaded once, widened to
//    int16 and, for each pair (i, i + 1) of a group's input channels,
//    VPERMW puts lane c's pair (x[base(c) + i], x[base(c) + i + 1]) next to
//    each other so that one VPDPWSSD with the pair's weights (w[i][c],
//    w[i + 1][c]) adds both products, exactly. ResNeXt's 32 groups of 4
//    channels: one span load and 2 x (VPERMW + VPDPWSSD) per tap and 16
//    channels (64 products).
//  * Otherwise (other paths, wide groups): each group is an ordinary
//    convolution over its own channels, run one group at a time through a
//    groups == 1 kernel on contiguous copies (the group's input channels,
//    its filter columns, its side input channels; the output is scattered
//    back into place).
//
// Declarations and plain structs only (included by baseline and ISA code).
#ifndef TF_FUSED_INT8_CC_CORE_CPU_GROUPED_GROUPED_H_
#define TF_FUSED_INT8_CC_CORE_CPU_GROUPED_GROUPED_H_

#include <cstdint>
#include <functional>

#include "cc/core/conv_params.h"
#include "cc/core/cpu/depthwise/depthwise.h"

namespace tf_fused_int8 {
namespace cpu {

// Runs `run(sub, cache_key, inner)` once per group; `sub` is a groups == 1
// call whose buffers are the group's contiguous copies. cache_key
// identifies the group's filter for the packed-weight cache (a copy's
// address is reused for every group, so it cannot): the original filter's
// address plus the group index, distinct for every group of one filter (the
// filter has at least out_c >= groups elements). `inner` is the ParallelFor
// the group's convolution must use: with many groups the groups themselves
// are spread over parallel_for's threads and inner is serial.
using PerGroupFn = std::function<void(const FusedConvArgs& sub,
                                      const int8_t* cache_key,
                                      const ParallelFor& inner)>;
void RunPerGroup(const FusedConvArgs& args, const ParallelFor& parallel_for,
                 const PerGroupFn& run);

// Lanes per block and the widest input-channel span a block may read.
constexpr int64_t kNarrowLanes = 16;
constexpr int64_t kNarrowSpan = 32;

// Whether the narrow-group kernel handles g: groups > 1, 2 to 8 input
// channels per group, and every block of 16 output channels reads at most
// kNarrowSpan consecutive input channels.
bool NarrowGroupsFit(const ConvGeometry& g);

// The row arguments (DirectRowArgs of depthwise.h: side input, output
// range, output, window ranges, rows) and the kernel's operands.
struct NarrowRowArgs : DirectRowArgs {
  const ConvGeometry* geo;
  const int8_t* input;        // [N, H, W, Ci]
  // Per block b (16 output channels), pair j of a group's input channels
  // (i = 2j, 2j + 1), tap t: 16 int32 lanes, lane l = channel 16b + l,
  // holding the int16 pair (w[t][2j][c], w[t][2j + 1][c]) (0 past Co or
  // past the group's channels). Index: ((b * taps + t) * pairs + j) * 16.
  const int32_t* weights;
  // Per block and pair: 32 int16 VPERMW indices into the widened span:
  // 2l -> base(c) + 2j - span_begin, 2l + 1 -> base(c) + 2j + 1 -
  // span_begin. Index: (b * pairs + j) * 32.
  const int16_t* perms;
  const int64_t* span_begin;  // [blocks] first input channel of the span
  const uint32_t* span_mask;  // [blocks] bytes of the span inside Ci
  const float* scale;         // [blocks * 16]
  const float* bias;          // [blocks * 16]
  int64_t blocks, pairs, taps;
};

// grouped_avx512vnni.cc
void NarrowGroupRowsAvx512Vnni(const NarrowRowArgs& d);

// Runs a call for which NarrowGroupsFit(args.geo) holds.
void RunNarrowGroups(const FusedConvArgs& args,
                     void (*rows)(const NarrowRowArgs&),
                     const ParallelFor& parallel_for);

}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_GROUPED_GROUPED_H_
