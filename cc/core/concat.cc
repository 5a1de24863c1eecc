// Copyright tf-fused-int8 authors. Apache 2.0.
#include "cc/core/concat.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cc/core/copy_piece.h"

namespace tf_fused_int8 {
namespace {

// Rows [r0, r1) of piece i: its own rows are contiguous, the output's
// `total` bytes apart.
void CopyRows(const int8_t* src, int64_t width, int64_t r0, int64_t r1, int8_t* dst,
              int64_t total) {
  src += r0 * width;
  dst += r0 * total;
  if (width > kCopyPieceMemcpyFrom) {
    for (int64_t r = r0; r < r1; ++r, src += width, dst += total) {
      std::memcpy(dst, src, static_cast<size_t>(width));
    }
  } else {
    for (int64_t r = r0; r < r1; ++r, src += width, dst += total) CopyPiece(dst, src, width);
  }
}

}  // namespace

void ConcatLastDim(const int8_t* const* inputs, const int64_t* widths, int64_t count,
                   int64_t rows, int8_t* out, const ParallelFor& parallel_for) {
  std::vector<int64_t> offsets(static_cast<size_t>(count));
  int64_t total = 0;
  for (int64_t i = 0; i < count; ++i) {
    offsets[i] = total;
    total += widths[i];
  }
  if (rows <= 0 || total <= 0) return;
  // One input, or one row: the pieces are contiguous in the output.
  if (count == 1 || rows == 1) {
    for (int64_t i = 0; i < count; ++i) {
      if (widths[i] > 0) {
        std::memcpy(out + offsets[i], inputs[i], static_cast<size_t>(rows * widths[i]));
      }
    }
    return;
  }
  // About a cycle per 16 bytes moved and a few per piece (the call's whole
  // cost decides whether the pool splits it: cc/tf/pool_parallel_for.cc).
  const int64_t cost_per_row = total / 16 + 4 * count + 1;
  parallel_for(rows, cost_per_row, [&](int64_t r0, int64_t r1) {
    // Piece by piece over the unit's rows: each loop reads one input and
    // writes one column of the output, both in order.
    for (int64_t i = 0; i < count; ++i) {
      if (widths[i] > 0) CopyRows(inputs[i], widths[i], r0, r1, out + offsets[i], total);
    }
  });
}

}  // namespace tf_fused_int8
