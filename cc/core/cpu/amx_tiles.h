// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The AMX tile configuration that every *_amx.cc unit uses: eight tiles of
// 16 rows x 64 bytes (palette 1). Include ONLY from translation units built
// with -mamx-tile (cc/core/cpu/*/*_amx.cc); everything here has internal
// linkage, for the reason gemm_kernels.h gives.
#ifndef TF_FUSED_INT8_CC_CORE_CPU_AMX_TILES_H_
#define TF_FUSED_INT8_CC_CORE_CPU_AMX_TILES_H_

#if !defined(__AMX_TILE__)
#error "amx_tiles.h belongs to the *_amx.cc units only"
#endif

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace tf_fused_int8 {
namespace cpu {
namespace {

// Orders plain loads and stores around the tile instructions: GCC's
// TILELOADD (and LDTILECFG beyond its first 8 bytes) has no memory operand
// the compiler sees, so without this the stores that fill a buffer could be
// sunk past the tile load that reads it.
inline void CompilerBarrier() { __asm__ volatile("" ::: "memory"); }

// LDTILECFG's 64-byte operand (Intel SDM, "TILECFG").
struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");

// Configures tmm0-7 as 16 rows x 64 bytes on the calling thread (this
// zeroes them). Pair with _tile_release() when done.
inline void LoadTileConfig16x64() {
  TileConfig c;
  std::memset(&c, 0, sizeof(c));
  c.palette_id = 1;
  for (int i = 0; i < 8; ++i) {
    c.rows[i] = 16;
    c.colsb[i] = 64;
  }
  CompilerBarrier();
  _tile_loadconfig(&c);
}

}  // namespace
}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_AMX_TILES_H_
