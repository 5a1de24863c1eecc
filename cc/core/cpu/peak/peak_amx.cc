// Copyright tf-fused-int8 authors. Apache 2.0.
//
// AMX throughput loop (peak.h): TDPBSSD, 16 x 16 x 64 int8 MACs into a C
// tile. Four independent C tiles (tmm0-3) from two A and two B tiles
// (tmm4-7), loaded once: four TDPBSSD per block, as the amx GEMM's
// micro-tile issues them, with no tile loads (an upper bound).
//
// tdpbssd_loads: the same four TDPBSSD per block, each block after loading
// its two A and two B tiles from a 64-byte aligned 16 KiB buffer (in L1),
// as every K step of the amx GEMM's 32 x 32 micro-tile does: the limit of
// that micro-tile with its operands in L1. On the KVM Xeon where the amx
// path was written (family 6 model 167) it read 5.1-5.5 TOPS per thread
// against tdpbssd's 6.3-6.4. The same loop on a buffer only 32-byte aligned
// (every 64-byte tile row split over two cache lines) read 1.7-1.8: the
// kernel's A buffers, padded input and packed weights are 64-byte aligned.
// (Pointwise layers whose channel count is not a multiple of 64 read their
// rows in place at that stride; an aligned copy measured no faster there:
// 28x28x144 -> 32, 56x56x96 -> 24, 56x56x24 -> 144, one thread.)
#include <cstring>

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

void PeakTdpbssdLoads(int64_t iters) {
  alignas(64) int8_t data[16 << 10];
  std::memset(data, 1, sizeof(data));
  LoadTileConfig16x64();
  for (int64_t i = 0; i < iters; ++i) {
    const int8_t* b = data + (i & 3) * 4096;
    _tile_loadd(6, b, 64);
    _tile_loadd(7, b + 1024, 64);
    _tile_loadd(4, b + 2048, 64);
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_loadd(5, b + 3072, 64);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
  }
  _tile_release();
}

}  // namespace cpu
}  // namespace tf_fused_int8
