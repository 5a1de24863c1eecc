// Copyright tf-fused-int8 authors. Apache 2.0.
//
// AMX throughput loop (peak.h): TDPBSSD, 16 x 16 x 64 int8 MACs into a C
// tile. Four independent C tiles (tmm0-3) from two A and two B tiles
// (tmm4-7), loaded once: four TDPBSSD per block, as the amx GEMM's
// micro-tile issues them, with no tile loads (an upper bound).
#include "cc/core/cpu/amx_tiles.h"
#include "cc/core/cpu/peak/peak.h"

namespace tf_fused_int8 {
namespace cpu {

void PeakTdpbssd(int64_t iters) {
  LoadTileConfig16x64();  // also zeroes tmm0-7: the operands are zero
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
  }
  _tile_release();
}

}  // namespace cpu
}  // namespace tf_fused_int8
