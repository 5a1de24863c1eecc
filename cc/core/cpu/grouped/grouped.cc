// Copyright tf-fused-int8 authors. Apache 2.0.
#include "cc/core/cpu/grouped/grouped.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cc/core/cpu/depthwise/depthwise.h"

namespace tf_fused_int8 {
namespace cpu {

void RunPerGroup(const FusedConvArgs& a, const ParallelFor& parallel_for,
                 const PerGroupFn& run) {
  const ConvGeometry& g = a.geo;
  const int64_t gin = g.GroupInC(), gout = g.GroupOutC();
  const int64_t in_pixels = g.batch * g.in_h * g.in_w;
  const int64_t out_pixels = g.batch * g.out_h * g.out_w;
  const int64_t taps = g.filter_h * g.filter_w;
  const bool side = a.HasSideInput();

  // Groups [first, last) one after another on one set of copies; `inner`
  // parallelizes the copies and each group's convolution.
  auto run_groups = [&](int64_t first, int64_t last, const ParallelFor& inner) {
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
    // Copies `rows` rows of `width` bytes from src (row stride src_stride,
    // column offset src_col) to dst (row stride dst_stride, offset dst_col).
    auto copy_rows = [&](const int8_t* src, int64_t src_stride, int64_t src_col,
                         int8_t* dst, int64_t dst_stride, int64_t dst_col,
                         int64_t rows, int64_t width) {
      inner(rows, width / 16 + 4, [&](int64_t begin, int64_t end) {
        for (int64_t p = begin; p < end; ++p) {
          std::memcpy(dst + p * dst_stride + dst_col, src + p * src_stride + src_col,
                      static_cast<size_t>(width));
        }
      });
    };
    for (int64_t grp = first; grp < last; ++grp) {
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
      run(sub, a.filter + grp, inner);
      // Each group writes its own output channels: groups run concurrently.
      copy_rows(output.data(), gout, 0, a.output, g.out_c, grp * gout, out_pixels, gout);
    }
  };

  // Many groups: spread whole groups over the threads (each group's small
  // convolution then runs serially; no per-group fork/join of the pool).
  // Few groups: one after another, each parallelized inside.
  const int threads = parallel_for.run ? parallel_for.num_threads : 1;
  if (threads > 1 && g.groups >= 2 * threads) {
    const int64_t cost = out_pixels * gout * g.ReductionDepth() / 32 + in_pixels * gin / 16;
    parallel_for(g.groups, cost, [&](int64_t begin, int64_t end) {
      run_groups(begin, end, ParallelFor());
    });
  } else {
    run_groups(0, g.groups, parallel_for);
  }
}

namespace {

// First input channel read by output channel c.
int64_t GroupBase(const ConvGeometry& g, int64_t c) {
  return (c / g.GroupOutC()) * g.GroupInC();
}

}  // namespace

bool NarrowGroupsFit(const ConvGeometry& g) {
  // Up to 8 input channels per group (4 pairs per tap): beyond that the
  // per-group GEMM's VPDPBUSD (64 products per instruction) wins at
  // batch > 1 despite the copies (ResNeXt: 32 x 4 and 32 x 8 go here,
  // 32 x 16 to the GEMM; see the benchmark's grouped layers).
  if (g.groups <= 1 || g.GroupInC() <= 1 || g.GroupInC() > 8) return false;
  for (int64_t c0 = 0; c0 < g.out_c; c0 += kNarrowLanes) {
    const int64_t last = std::min(g.out_c, c0 + kNarrowLanes) - 1;
    if (GroupBase(g, last) + g.GroupInC() - GroupBase(g, c0) > kNarrowSpan) {
      return false;
    }
  }
  return true;
}

void RunNarrowGroups(const FusedConvArgs& a, void (*rows)(const NarrowRowArgs&),
                     const ParallelFor& parallel_for) {
  const ConvGeometry& g = a.geo;
  const int64_t gin = g.GroupInC();
  const int64_t taps = g.filter_h * g.filter_w;
  const int64_t pairs = (gin + 1) / 2;
  const int64_t blocks = (g.out_c + kNarrowLanes - 1) / kNarrowLanes;
  std::vector<int32_t> weights(static_cast<size_t>(blocks * taps * pairs * 16), 0);
  std::vector<int16_t> perms(static_cast<size_t>(blocks * pairs * 32), 0);
  std::vector<int64_t> span_begin(static_cast<size_t>(blocks));
  std::vector<uint32_t> span_mask(static_cast<size_t>(blocks));
  std::vector<float> scale(static_cast<size_t>(blocks * 16), 0.0f);
  std::vector<float> bias(static_cast<size_t>(blocks * 16), 0.0f);
  auto pair_bits = [](int8_t lo, int8_t hi) {
    return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(int16_t{lo})) |
                                (static_cast<uint32_t>(static_cast<uint16_t>(int16_t{hi})) << 16));
  };
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t c0 = b * kNarrowLanes;
    const int64_t begin = GroupBase(g, c0);
    span_begin[b] = begin;
    const int64_t bytes = std::min(kNarrowSpan, g.in_c - begin);
    span_mask[b] = bytes >= 32 ? 0xFFFFFFFFu : ((1u << bytes) - 1);
    for (int64_t l = 0; l < kNarrowLanes; ++l) {
      const int64_t c = c0 + l;
      if (c >= g.out_c) break;
      scale[c] = a.conv_input_scale[a.per_channel_scale ? c : 0];
      bias[c] = a.bias[c];
      const int64_t base = GroupBase(g, c) - begin;
      for (int64_t j = 0; j < pairs; ++j) {
        const int64_t i0 = 2 * j, i1 = 2 * j + 1;
        int16_t* perm = perms.data() + (b * pairs + j) * 32;
        perm[2 * l] = static_cast<int16_t>(base + i0);
        // Past the group's channels the weight is 0: any valid index.
        perm[2 * l + 1] = static_cast<int16_t>(i1 < gin ? base + i1 : base + i0);
        for (int64_t t = 0; t < taps; ++t) {
          const int8_t* w = a.filter + t * gin * g.out_c + c;  // [taps, gin, Co]
          const int8_t w1 = i1 < gin ? w[i1 * g.out_c] : int8_t{0};
          weights[((b * taps + t) * pairs + j) * 16 + l] = pair_bits(w[i0 * g.out_c], w1);
        }
      }
    }
  }
  WindowRanges ranges;
  ComputeWindowRanges(g, &ranges);

  NarrowRowArgs base;
  FillDirectRowArgs(a, ranges, &base);
  base.geo = &g;
  base.input = a.input;
  base.weights = weights.data();
  base.perms = perms.data();
  base.span_begin = span_begin.data();
  base.span_mask = span_mask.data();
  base.scale = scale.data();
  base.bias = bias.data();
  base.blocks = blocks;
  base.pairs = pairs;
  base.taps = taps;
  // Cycles per output row: per pixel, block and tap about one span load and
  // a VPERMW + VPDPWSSD per pair, plus the epilogue.
  const int64_t cost = g.out_w * blocks * (taps * (1 + 2 * pairs) + 8);
  parallel_for(g.batch * g.out_h, cost, [&](int64_t begin, int64_t end) {
    NarrowRowArgs d = base;
    d.row_begin = begin;
    d.row_end = end;
    rows(d);
  });
}

}  // namespace cpu
}  // namespace tf_fused_int8
