// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Concatenation of int8 tensors along their last dimension (NHWC channels):
// what a quantized model's Concatenate of tensors that share one scale is
// (DenseNet's dense blocks, Inception's and NASNet's branches), a copy of
// bytes. Input i is `rows` rows of widths[i] bytes; the output is `rows`
// rows of the widths' sum, input i's bytes at its offset in every row.
//
// Why not TF's ConcatV2: on two threads TF's concat shards its rows over
// the intra-op pool, one of whose threads a helper of ours may hold
// (spinning between our ops, cc/tf/pool_parallel_for.cc): DenseNet121 at
// batch 1 spent 66 us per concatenation on two threads against 15.6 on one
// (TF's step stats, InferenceRunner, Zen 4 VM), 23% of its ops' time. This
// copy runs on the same parallel-for as our convolutions (inline when
// small), each piece of a row with a few fixed-size moves instead of a
// memcpy call per piece and row.
#ifndef TF_FUSED_INT8_CC_CORE_CONCAT_H_
#define TF_FUSED_INT8_CC_CORE_CONCAT_H_

#include <cstdint>

#include "cc/core/conv_params.h"

namespace tf_fused_int8 {

// out[r * W + offset_i + j] = inputs[i][r * widths[i] + j] for every row r <
// rows, input i < count and j < widths[i], with W the sum of the widths and
// offset_i the sum of the widths before i. Widths may be 0; inputs of width
// 0 are not read. Reads exactly the inputs' bytes and writes exactly the
// output's.
void ConcatLastDim(const int8_t* const* inputs, const int64_t* widths, int64_t count,
                   int64_t rows, int8_t* out, const ParallelFor& parallel_for);

}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CONCAT_H_
