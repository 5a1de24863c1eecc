// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Portable kernel: blocked im2col + int32 GEMM in plain C++, the fallback on
// CPUs without a dedicated instruction-set path. Output pixels are split into
// tiles of kTileM rows that threads take independently; each tile is gathered
// once (skipped for pointwise convolutions, whose input already is the GEMM
// operand) and multiplied by the HWIO filter, kBlockN output channels at a
// time so that the accumulators stay in L1.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "cc/core/cpu/gemm/im2col.h"
#include "cc/core/epilogue.h"
#include "cc/core/fused_conv.h"

namespace tf_fused_int8 {
namespace {

constexpr int64_t kTileM = 16;
constexpr int64_t kBlockN = 64;

void RunTiles(const FusedConvArgs& a, int64_t tile_begin, int64_t tile_end) {
  const ConvGeometry& g = a.geo;
  const int64_t pixels = g.batch * g.out_h * g.out_w;
  const int64_t depth = g.ReductionDepth();
  const int64_t co = g.out_c;
  const bool pointwise = IsPointwise(g);
  std::vector<int8_t> patch(pointwise ? 0 : static_cast<size_t>(kTileM * depth));
  int32_t acc[kBlockN];
  for (int64_t t = tile_begin; t < tile_end; ++t) {
    const int64_t p0 = t * kTileM;
    const int64_t rows = std::min(kTileM, pixels - p0);
    const int8_t* lhs;
    if (pointwise) {
      lhs = a.input + p0 * depth;
    } else {
      Im2ColRows(a.input, g, p0, rows, patch.data(), depth);
      lhs = patch.data();
    }
    for (int64_t n0 = 0; n0 < co; n0 += kBlockN) {
      const int64_t nb = std::min(kBlockN, co - n0);
      for (int64_t m = 0; m < rows; ++m) {
        const int8_t* row = lhs + m * depth;
        for (int64_t j = 0; j < nb; ++j) acc[j] = 0;
        for (int64_t k = 0; k < depth; ++k) {
          const int32_t x = row[k];
          const int8_t* w = a.filter + k * co + n0;
          for (int64_t j = 0; j < nb; ++j) acc[j] += x * static_cast<int32_t>(w[j]);
        }
        const int64_t o = (p0 + m) * co + n0;
        EpilogueRow(a, acc, n0, nb, a.HasSideInput() ? a.side_input + o : nullptr,
                    a.output + o);
      }
    }
  }
}

}  // namespace

void RunPortable(const FusedConvArgs& a, const ParallelFor& parallel_for) {
  const ConvGeometry& g = a.geo;
  const int64_t pixels = g.batch * g.out_h * g.out_w;
  if (pixels == 0 || g.out_c == 0) return;
  const int64_t tiles = (pixels + kTileM - 1) / kTileM;
  const int64_t cost = kTileM * g.ReductionDepth() * g.out_c + kTileM * g.out_c * 8;
  parallel_for(tiles, cost, [&](int64_t begin, int64_t end) {
    RunTiles(a, begin, end);
  });
}

}  // namespace tf_fused_int8
