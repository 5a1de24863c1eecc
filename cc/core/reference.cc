// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The reference kernel: one output element at a time, exact int32
// accumulation, then the contract epilogue. Slow on purpose: it is the kernel
// every faster path is compared against, bit for bit.
#include <cstdint>

#include "cc/core/epilogue.h"
#include "cc/core/fused_conv.h"

namespace tf_fused_int8 {

void RunReference(const FusedConvArgs& a) {
  const ConvGeometry& g = a.geo;
  const bool has_side = a.HasSideInput();
  int32_t lo_i, hi_i;
  OutputBounds(a, &lo_i, &hi_i);
  const float lo = static_cast<float>(lo_i), hi = static_cast<float>(hi_i);
  // Grouped convolution: output channel co reads the group_in_c input
  // channels of its group, starting at channel ci0; the filter has
  // group_in_c input rows.
  const int64_t group_in_c = g.GroupInC();
  const int64_t group_out_c = g.GroupOutC();
  for (int64_t n = 0; n < g.batch; ++n) {
    for (int64_t oy = 0; oy < g.out_h; ++oy) {
      for (int64_t ox = 0; ox < g.out_w; ++ox) {
        const int64_t out_pixel = (n * g.out_h + oy) * g.out_w + ox;
        for (int64_t co = 0; co < g.out_c; ++co) {
          const int64_t ci0 = (co / group_out_c) * group_in_c;
          int32_t acc = 0;
          for (int64_t ky = 0; ky < g.filter_h; ++ky) {
            const int64_t iy = oy * g.stride_h - g.pad_top + ky * g.dilation_h;
            if (iy < 0 || iy >= g.in_h) continue;
            for (int64_t kx = 0; kx < g.filter_w; ++kx) {
              const int64_t ix =
                  ox * g.stride_w - g.pad_left + kx * g.dilation_w;
              if (ix < 0 || ix >= g.in_w) continue;
              const int8_t* in =
                  a.input + ((n * g.in_h + iy) * g.in_w + ix) * g.in_c + ci0;
              const int8_t* w =
                  a.filter + ((ky * g.filter_w + kx) * group_in_c) * g.out_c + co;
              for (int64_t ci = 0; ci < group_in_c; ++ci) {
                acc += static_cast<int32_t>(in[ci]) *
                       static_cast<int32_t>(w[ci * g.out_c]);
              }
            }
          }
          const int64_t o = out_pixel * g.out_c + co;
          const float scale = a.conv_input_scale[a.per_channel_scale ? co : 0];
          a.output[o] = LutScalar(
              a.output_lut,
              EpilogueScalar(acc, scale, a.bias[co], has_side,
                             has_side ? a.side_input[o] : int8_t{0},
                             a.side_input_scale, lo, hi));
        }
      }
    }
  }
}

}  // namespace tf_fused_int8
