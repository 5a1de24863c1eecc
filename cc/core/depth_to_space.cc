// Copyright tf-fused-int8 authors. Apache 2.0.
#include "cc/core/depth_to_space.h"

#include <cstdint>
#include <cstring>

#include "cc/core/copy_piece.h"

namespace tf_fused_int8 {
namespace {

// Output rows [r0, r1) (row r = (n h + y) bh + i): each is w pieces of
// `piece` = bw c bytes, read bh * piece bytes apart from input row n h + y
// at offset i * piece, written one after another.
template <bool kMemcpy>
void CopyOutputRows(const int8_t* in, int64_t w, int64_t bh, int64_t piece, int64_t r0,
                    int64_t r1, int8_t* out) {
  const int64_t in_pixel = bh * piece;   // one input pixel's bytes
  const int64_t in_row = w * in_pixel;   // one input row's bytes
  const int64_t out_row = w * piece;     // one output row's bytes
  for (int64_t r = r0; r < r1; ++r) {
    const int8_t* src = in + (r / bh) * in_row + (r % bh) * piece;
    int8_t* dst = out + r * out_row;
    for (int64_t x = 0; x < w; ++x, src += in_pixel, dst += piece) {
      if (kMemcpy) {
        std::memcpy(dst, src, static_cast<size_t>(piece));
      } else {
        CopyPiece(dst, src, piece);
      }
    }
  }
}

}  // namespace

void DepthToSpaceNhwc(const int8_t* in, int64_t batch, int64_t h, int64_t w, int64_t c,
                      int64_t bh, int64_t bw, int8_t* out, const ParallelFor& parallel_for) {
  const int64_t piece = bw * c;
  const int64_t rows = batch * h * bh;
  if (rows <= 0 || w <= 0 || piece <= 0) return;
  // About a cycle per 16 bytes moved and a few per piece, as the concat
  // (the call's whole cost decides whether the pool splits it).
  const int64_t cost_per_row = w * (piece / 16 + 4) + 1;
  parallel_for(rows, cost_per_row, [&](int64_t r0, int64_t r1) {
    if (piece > kCopyPieceMemcpyFrom) {
      CopyOutputRows<true>(in, w, bh, piece, r0, r1, out);
    } else {
      CopyOutputRows<false>(in, w, bh, piece, r0, r1, out);
    }
  });
}

void InterleavePhasesNhwc(const int8_t* phases, int64_t phase_stride, int64_t batch,
                          int64_t h, int64_t w, int64_t c, int64_t bh, int64_t bw,
                          int64_t crop_top, int64_t crop_left, int64_t out_h,
                          int64_t out_w, int8_t* out, const ParallelFor& parallel_for) {
  const int64_t rows = batch * out_h;
  if (rows <= 0 || out_w <= 0 || c <= 0) return;
  const int64_t cost_per_row = out_w * (c / 16 + 4) + 1;
  parallel_for(rows, cost_per_row, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / out_h, y = r % out_h + crop_top;
      // The phase row's bytes of image n, input row y / bh.
      const int8_t* row = phases + (y % bh) * bw * phase_stride + ((n * h + y / bh) * w) * c;
      int8_t* dst = out + r * out_w * c;
      for (int64_t x = 0; x < out_w; ++x, dst += c) {
        const int64_t xx = x + crop_left;
        const int8_t* src = row + (xx % bw) * phase_stride + (xx / bw) * c;
        if (c > kCopyPieceMemcpyFrom) {
          std::memcpy(dst, src, static_cast<size_t>(c));
        } else {
          CopyPiece(dst, src, c);
        }
      }
    }
  });
}

}  // namespace tf_fused_int8
