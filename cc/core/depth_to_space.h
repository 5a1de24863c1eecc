// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Depth-to-space of an int8 NHWC tensor (TF's DepthToSpace, NHWC, and its
// non-square blocks bh x bw): the copy after the convolution that
// quantize_model makes of a Conv2DTranspose (the sub-pixel form), which
// puts each pixel's bh * bw phases at their output pixels. For output row
// y = h bh + i, the bw * c bytes of input pixel (h, w) from channel i bw c
// on are output pixels (y, w bw) .. (y, w bw + bw - 1): one contiguous piece
// each way, so the op is W pieces of bw * c bytes per output row.
//
// Why not TF's DepthToSpace: it moved int8 tensors at a fraction of a
// copy's speed (tf.function, Zen 4 VM, one thread: 112x112x64 -> 224x224x16
// about 250 us against 55-75 us for a FusedInt8Concat of the same bytes),
// and it shards over the intra-op pool whose thread our helper holds between
// ops (cc/core/concat.h). This copy runs on the convolutions' parallel-for.
#ifndef TF_FUSED_INT8_CC_CORE_DEPTH_TO_SPACE_H_
#define TF_FUSED_INT8_CC_CORE_DEPTH_TO_SPACE_H_

#include <cstdint>

#include "cc/core/conv_params.h"

namespace tf_fused_int8 {

// FusedInt8DepthToSpace's block_height / block_width range (its shape
// function and kernel both check it): far beyond any model's, and small
// enough that their product and a size times either never overflow int64
// in the checks.
constexpr int64_t kMaxDepthToSpaceBlock = 1 << 16;
inline bool DepthToSpaceBlockInRange(int64_t block) {
  return block >= 1 && block <= kMaxDepthToSpaceBlock;
}

// in: [batch, h, w, bh * bw * c]; out: [batch, h * bh, w * bw, c],
// out[n][y bh + i][x bw + j][k] = in[n][y][x][(i bw + j) c + k] (bh, bw >=
// 1, c >= 0; the caller checks the sizes). Reads exactly the input's bytes
// and writes exactly the output's.
void DepthToSpaceNhwc(const int8_t* in, int64_t batch, int64_t h, int64_t w, int64_t c,
                      int64_t bh, int64_t bw, int8_t* out, const ParallelFor& parallel_for);

// The same with each phase in a tensor of its own, and a crop: phase (i, j)
// is [batch, h, w, c] at phases + (i bw + j) * phase_stride (bytes);
// out: [batch, out_h, out_w, c], out[n][y][x][k] = phase (Y % bh, X % bw)
// at [n][Y / bh][X / bw][k] with Y = y + crop_top, X = x + crop_left (the
// caller checks crop_top + out_h <= h bh and crop_left + out_w <= w bw).
// A transposed convolution's phases (transposed_conv.h). Writes exactly
// the output's bytes.
void InterleavePhasesNhwc(const int8_t* phases, int64_t phase_stride, int64_t batch,
                          int64_t h, int64_t w, int64_t c, int64_t bh, int64_t bw,
                          int64_t crop_top, int64_t crop_left, int64_t out_h,
                          int64_t out_w, int8_t* out, const ParallelFor& parallel_for);

}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_DEPTH_TO_SPACE_H_
