// Copyright tf-fused-int8 authors. Apache 2.0.
//
// A transposed convolution (Keras's Conv2DTranspose, dilation 1) as one
// convolution per output phase. quantize_model runs a Conv2DTranspose of
// kernel k and stride s as its sub-pixel form (quantization.py,
// _transpose_plan): a stride-1 convolution of ceil(k / s) taps per axis to
// s_h * s_w * Co channels (phase (r_h, r_w) of output channel c is channel
// (r_h * s_w + r_w) * Co + c), a depth-to-space and a crop. Where k is not
// a multiple of s, each phase reads only some of those taps and the others
// are zeros: a 3x3 stride-2 kernel is 16 taps of which 9 are not zero, a
// 5x5 stride-2 one 36 of which 25 are. This runs each phase as its own
// convolution over the taps it reads (a box of the sub-pixel filter's taps:
// the rows [row_start, row_start + row_taps) of phase row r_h, times the
// columns of phase column r_w), each into its own [N, Hq, Wq, Co] buffer,
// then interleaves the phases into the output and crops it, in one call:
// the same bits as the sub-pixel convolution (the taps left out add exact
// zeros to the int32 sum), with only the non-zero taps multiplied.
//
// Why in one call: the phases as separate ops plus a depth-to-space ran a
// 3x3 stride-2 layer in 0.68x the time (bench_core), but a U-Net with such
// decoders 0.96-1.07x in a tf.function on two threads (stop 75: the extra
// ops' dispatch ate the gain); the sequence op runs this as one step
// (cc/tf/conv_sequence_kernel.cc, step_kinds 2).
#ifndef TF_FUSED_INT8_CC_CORE_TRANSPOSED_CONV_H_
#define TF_FUSED_INT8_CC_CORE_TRANSPOSED_CONV_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cc/core/conv_params.h"
#include "cc/core/fused_conv.h"

namespace tf_fused_int8 {

struct TransposedConvPhases {
  int64_t block_h = 1, block_w = 1;  // the strides s_h, s_w: the phases
  // Per phase row r_h (block_h entries): the sub-pixel filter rows it reads,
  // [row_start, row_start + row_taps); per phase column likewise.
  std::vector<int64_t> row_start, row_taps, col_start, col_taps;
  // Rows / columns of the interleaved [N, Hq * block_h, Wq * block_w, Co]
  // result left out of the output on each side.
  int64_t crop_top = 0, crop_bottom = 0, crop_left = 0, crop_right = 0;

  int64_t Phases() const { return block_h * block_w; }
};

// "" when `p` fits the sub-pixel convolution `g` (its geometry computed by
// ComputeGeometry): stride 1, dilation 1, groups 1, out_c a multiple of the
// phases, block sizes in [1, 2^16] with one box entry each, every box inside
// the filter with at least one tap and the padding before and after it not
// negative (pad_top - row_start and pad_bottom - (filter_h - row_start -
// row_taps), and so across), crops not negative and within the result.
// Else a message naming what is wrong. Never aborts.
std::string CheckTransposedConvPhases(const ConvGeometry& g, const TransposedConvPhases& p);

// The sequence ops' transpose_steps attr: one record per such step, in
// increasing step order, each [step, block_h, block_w, crop_top,
// crop_bottom, crop_left, crop_right, then (row_start, row_taps) per phase
// row and (col_start, col_taps) per phase column]. Fills *out with (step,
// phases) pairs; "" or a message naming the record and what is wrong (the
// boxes themselves are checked against the geometry later,
// CheckTransposedConvPhases). Never aborts.
std::string ParseTransposedConvRecords(const std::vector<int64_t>& records, int64_t steps,
                                       std::vector<std::pair<int64_t, TransposedConvPhases>>* out);

// Bytes of the phase filters, back to back in phase order (r_h * block_w +
// r_w), each HWIO [row_taps[r_h], col_taps[r_w], in_c, out_c / phases] and
// starting at a multiple of 64 bytes (zeros between); -1 if p's vectors do
// not match its blocks or a size is not positive. The sequence op's filter
// slot of such a step holds exactly this (layers.conv_sequence_layout).
int64_t TransposedConvFilterBytes(int64_t in_c, int64_t out_c, const TransposedConvPhases& p);

// The output's height, width and channels (p checked against g).
void TransposedConvOutputShape(const ConvGeometry& g, const TransposedConvPhases& p,
                               int64_t* h, int64_t* w, int64_t* c);

// The scratch RunTransposedConv needs: every phase's [N, Hq, Wq, Co], i.e.
// g.OutputElements() bytes.
inline int64_t TransposedConvScratchBytes(const ConvGeometry& g) { return g.OutputElements(); }

// Runs the phases and the interleave. a.geo: the sub-pixel convolution's,
// computed and checked (CheckTransposedConvPhases); a.filter: the phase
// filters (TransposedConvFilterBytes); a.bias [out_c] and
// a.conv_input_scale [1] or [out_c] as for the sub-pixel convolution;
// no side input; a.output: [N, h, w, c] of TransposedConvOutputShape;
// scratch: TransposedConvScratchBytes bytes, sharing none with the rest.
// Returns "" or a core error (nothing useful written then).
std::string RunTransposedConv(const FusedConvArgs& a, const TransposedConvPhases& p,
                              int8_t* scratch, KernelPath path,
                              const ParallelFor& parallel_for);

}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_TRANSPOSED_CONV_H_
