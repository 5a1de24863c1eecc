// Copyright tf-fused-int8 authors. Apache 2.0.
#include "cc/core/cpu/grouped.h"

#include <cstdint>
#include <cstring>
#include <vector>

namespace tf_fused_int8 {
namespace cpu {

void RunPerGroup(
    const FusedConvArgs& a, const ParallelFor& parallel_for,
    const std::function<void(const FusedConvArgs& sub, const int8_t* cache_key)>& run) {
  const ConvGeometry& g = a.geo;
  const int64_t gin = g.GroupInC(), gout = g.GroupOutC();
  const int64_t in_pixels = g.batch * g.in_h * g.in_w;
  const int64_t out_pixels = g.batch * g.out_h * g.out_w;
  const int64_t taps = g.filter_h * g.filter_w;
  const bool side = a.HasSideInput();

  std::vector<int8_t> input(static_cast<size_t>(in_pixels * gin));
  std::vector<int8_t> filter(static_cast<size_t>(taps * gin * gout));
  std::vector<int8_t> side_input(side ? static_cast<size_t>(out_pixels * gout) : 0);
  std::vector<int8_t> output(static_cast<size_t>(out_pixels * gout));

  FusedConvArgs sub = a;
  sub.geo.in_c = gin;
  sub.geo.out_c = gout;
  sub.geo.groups = 1;
  sub.input = input.data();
  sub.filter = filter.data();
  sub.side_input = side ? side_input.data() : nullptr;
  sub.output = output.data();

  // Copies `pixels` rows of `width` bytes from src (row stride src_stride,
  // column offset src_col) to dst (row stride dst_stride, offset dst_col).
  auto copy_rows = [&](const int8_t* src, int64_t src_stride, int64_t src_col,
                       int8_t* dst, int64_t dst_stride, int64_t dst_col,
                       int64_t rows, int64_t width) {
    parallel_for(rows, width + 16, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        std::memcpy(dst + p * dst_stride + dst_col, src + p * src_stride + src_col,
                    static_cast<size_t>(width));
      }
    });
  };

  for (int64_t grp = 0; grp < g.groups; ++grp) {
    // Input channels [grp * gin, +gin) of every pixel.
    copy_rows(a.input, g.in_c, grp * gin, input.data(), gin, 0, in_pixels, gin);
    // Filter rows (ky, kx, ci) of the group's gin inputs are already the
    // group's own: [Kh, Kw, gin, Co]; take output columns [grp * gout, +gout).
    for (int64_t row = 0; row < taps * gin; ++row) {
      std::memcpy(filter.data() + row * gout, a.filter + row * g.out_c + grp * gout,
                  static_cast<size_t>(gout));
    }
    if (side) {
      copy_rows(a.side_input, g.out_c, grp * gout, side_input.data(), gout, 0,
                out_pixels, gout);
    }
    sub.bias = a.bias + grp * gout;
    sub.conv_input_scale = a.conv_input_scale + (a.per_channel_scale ? grp * gout : 0);
    run(sub, a.filter + grp);
    copy_rows(output.data(), gout, 0, a.output, g.out_c, grp * gout, out_pixels, gout);
  }
}

}  // namespace cpu
}  // namespace tf_fused_int8
