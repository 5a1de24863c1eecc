// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The AMX tile configuration that every *_amx.cc unit uses: eight tiles of
// 16 rows x 64 bytes (palette 1). Include ONLY from translation units built
// with -mamx-tile (cc/core/cpu/*/*_amx.cc); everything here has internal
// linkage, for the reason gemm_kernels.h gives.
#ifndef TF_FUSED_INT8_CC_CORE_CPU_AMX_TILES_H_
#define TF_FUSED_INT8_CC_CORE_CPU_AMX_TILES_H_

#if !defined(__AMX_TILE__) && !defined(TF_FUSED_INT8_EMULATED_ISAS)
#error "amx_tiles.h belongs to the *_amx.cc units only"
#endif

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace tf_fused_int8 {
namespace cpu {
namespace {

#if defined(TF_FUSED_INT8_EMULATED_ISAS)
// core_test_emulated's build (BUILD: the *_amx.cc files built with the
// avx512vnni flags only): the tile instructions the amx kernels use, in
// plain C++ on this thread's copy of tmm0-7, so that every other
// instruction of the amx path is tested bit for bit on CPUs without AMX
// (QEMU emulates none). The names stand for the intrinsics below; the
// configuration is the one LoadTileConfig16x64 sets (every tile 16 rows x
// 64 bytes). TDPBSSD: C[m][n] += sum_{g < 16, i < 4} A[m][4g + i] *
// B[g][4n + i], signed x signed, int32 wrapping. Never in the op library:
// only that test's build defines the macro.
struct alignas(64) EmulatedTiles {
  int8_t t[8][16][64];
};

inline EmulatedTiles& Tiles() {
  static thread_local EmulatedTiles tiles;
  return tiles;
}

inline void EmulatedTileLoad(int dst, const void* base, int64_t stride) {
  for (int r = 0; r < 16; ++r) {
    std::memcpy(Tiles().t[dst][r], static_cast<const char*>(base) + r * stride, 64);
  }
}

inline void EmulatedTileStore(int src, void* base, int64_t stride) {
  for (int r = 0; r < 16; ++r) {
    std::memcpy(static_cast<char*>(base) + r * stride, Tiles().t[src][r], 64);
  }
}

inline void EmulatedTileZero(int dst) { std::memset(Tiles().t[dst], 0, sizeof(Tiles().t[dst])); }

inline void EmulatedTileDpbssd(int c, int a, int b) {
  EmulatedTiles& k = Tiles();
  for (int m = 0; m < 16; ++m) {
    for (int n = 0; n < 16; ++n) {
      uint32_t acc;
      std::memcpy(&acc, &k.t[c][m][4 * n], 4);
      for (int g = 0; g < 16; ++g) {
        for (int i = 0; i < 4; ++i) {
          acc += static_cast<uint32_t>(int32_t{k.t[a][m][4 * g + i]} * k.t[b][g][4 * n + i]);
        }
      }
      std::memcpy(&k.t[c][m][4 * n], &acc, 4);
    }
  }
}

#define _tile_loadd(dst, base, stride) EmulatedTileLoad(dst, base, stride)
#define _tile_stored(src, base, stride) EmulatedTileStore(src, base, stride)
#define _tile_zero(dst) EmulatedTileZero(dst)
#define _tile_dpbssd(c, a, b) EmulatedTileDpbssd(c, a, b)
#define _tile_loadconfig(config) EmulatedTileZeroAll(config)
#define _tile_release() EmulatedTileZeroAll(nullptr)

// LDTILECFG and TILERELEASE zero every tile.
inline void EmulatedTileZeroAll(const void* config) {
  (void)config;
  std::memset(&Tiles(), 0, sizeof(EmulatedTiles));
}
#endif

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
