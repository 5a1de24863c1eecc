// Copyright tf-fused-int8 authors. Apache 2.0.
#include "cc/core/pad.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace tf_fused_int8 {

void PadCropNhwc(const int8_t* in, int64_t batch, int64_t h, int64_t w, int64_t c,
                 const int64_t pads[4], int8_t* out, const ParallelFor& parallel_for) {
  const int64_t top = pads[0], left = pads[2];
  const int64_t oh = h + pads[0] + pads[1], ow = w + pads[2] + pads[3];
  if (batch <= 0 || oh <= 0 || ow <= 0 || c <= 0) return;
  // Output columns [x0, x1) read input columns [x0 - left, x1 - left).
  const int64_t x0 = std::min(ow, std::max<int64_t>(0, left));
  const int64_t x1 = std::max(x0, std::min(ow, w + left));
  const int64_t row_bytes = ow * c;
  // About a cycle per 16 bytes written, and a few per row.
  parallel_for(batch * oh, row_bytes / 16 + 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int8_t* dst = out + r * row_bytes;
      const int64_t n = r / oh, y = r % oh - top;
      if (y < 0 || y >= h || x1 == x0) {
        std::memset(dst, 0, static_cast<size_t>(row_bytes));
        continue;
      }
      if (x0 > 0) std::memset(dst, 0, static_cast<size_t>(x0 * c));
      std::memcpy(dst + x0 * c, in + ((n * h + y) * w + (x0 - left)) * c,
                  static_cast<size_t>((x1 - x0) * c));
      if (x1 < ow) std::memset(dst + x1 * c, 0, static_cast<size_t>((ow - x1) * c));
    }
  });
}

}  // namespace tf_fused_int8
