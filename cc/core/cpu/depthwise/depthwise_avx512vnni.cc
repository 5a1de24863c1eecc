// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Depthwise row kernels, AVX-512 (BW/VL) + VNNI.
//
// 3x3, stride 1 or 2, dilation 1 (MobileNet's depthwise layers), interior
// columns: 64 channels per step with u8 x s8 VPDPBUSD, which sums four
// products per int32 lane. A lane (one channel) holds four horizontally
// adjacent input pixels, D = (x[q], x[q+1], x[q+2], x[q+3]) (bytes, +128 as
// in the GEMM: x ^ 0x80), built for 64 channels by the 8 unpacks of the
// GEMM's packing, which leave the channels in its interleaved lane order
// (gemm_kernels.h kFormatZmmU8: zmm j, 128-bit lane L, dword i = channel
// 16L + 4j + i), so that the GEMM's Epilogue64 stores them. Per filter row
// the weights are pre-arranged in the same order as dwords:
//   stride 1: pixel ox   = D . (w0, w1, w2, 0)
//             pixel ox+1 = D . (0, w0, w1, w2)           one D, two pixels
//   stride 2: pixel ox   = D . (w0, w1, w2, 0)
//             pixel ox+1 = D . (0, 0, w0, w1) + E . (w2, 0, 0, 0),
//             E = x[q+4] zero-extended to dwords (4 VPSHUFB), or in
//             runs of pairs the next pair's D (x[q+4], ..., x[q+7]) times
//             the same weights (Interior3x3::PairsS2)
// so a pair of pixels costs 8 (stride 1) or 12 (stride 2) VPDPBUSD per
// filter row and 64 channels, against 24 VPDPWSSD of the one-tap-per-lane
// kernel below. Exactness: products of u8 (x + 128) and s8 w are exact,
// four summed in an int32 lane exactly (|4 * 255 * 128| < 2^31), and the
// +128 is undone per valid filter row by adding -128 * (w0 + w1 + w2);
// zero weight bytes make the fourth pixel (or the zero bytes of E) count
// nothing whatever it holds. int32 sums of 9 taps cannot overflow.
// Border columns (window partly outside), and every other geometry, run the
// one-tap-per-lane kernel of depthwise_rows.h: 16 channels in one zmm of
// int32, one VPDPWSSD per tap (sign-extended int8 activations times the
// widened weights of depthwise.h). Epilogues: Epilogue64 / Epilogue16Natural
// (epilogue_avx512.h).
//
// The full 64-channel blocks take this path, and so do 32 channels after
// them (a half block: cc % 64 >= 32; 32 channels of two pixel pairs side
// by side in each zmm, Interior3x3::Multi; interior groups of 4 pixels
// only, its borders run the 16-channel kernel) and at stride 1 on rows of
// 32 outputs or more 16 channels after those (a quarter block: four pixel
// pairs, one per 128-bit lane, groups of 8 pixels). The remaining channels
// run the 16-channel kernel everywhere. A call of 33-63 channels (17-31 at
// stride 1) runs one partial block instead: the full blocks' code with every
// load and store under a channel mask (PartialBlock3x3). The half
// block, alternated with the binary before it (bench_core, one Zen 5
// thread): 112x112x32 (MobileNetV2's first depthwise layer) 100 -> 64 us
// at batch 1 and 1000 -> 530 us at batch 8, 112x112x96 / 2 77 -> 68 us,
// 56x56x160 95 -> 84 us. Measured back to back
// (tools/bench/bench_core, one thread, Zen 4, which runs a zmm instruction
// as two 256-bit halves): 56x56x128 s1 156 -> 124 us, 28x28x128 44 -> 33 us,
// 56x56x192 245 -> 196 us; stride 2 (112x112x96) about 2x. Then blocks
// outer and rows inner (L1 reuse, Rows3x3), the full interior pairs
// specialized and the epilogue inlined by value (no accumulator spills),
// old and new binaries alternated three times, one thread, Zen 4 VM:
// 14x14x576 34-50 -> 28-29 us, 56x56x144 143-160 -> 124-132 us, 28x28x192
// 46-51 -> 39-57 us, 7x7x960 15-19 -> 15 us. The same loop order in the
// 16-channel kernel (depthwise_rows.h) changed nothing on the AVX2 path,
// which is bound by its PMADDWDs there.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "cc/core/cpu/depthwise/depthwise.h"
#include "cc/core/cpu/depthwise/depthwise_identity.h"
#include "cc/core/cpu/depthwise/depthwise_rows.h"
#include "cc/core/cpu/gemm/gemm_isa_common.h"
#include "cc/core/cpu/gemm/gemm_kernels.h"
#include "cc/core/cpu/static_count.h"
#include "cc/core/dword_spread.h"
#include "cc/core/epilogue.h"
#include "cc/core/epilogue_avx512.h"

// GCC 12 warns about its own _mm512_undefined_* inside the intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace tf_fused_int8 {
namespace cpu {
namespace {

struct Zmm16 {
  using Acc = __m512i;
  using X = __m512i;
  using W = __m512i;
  using Tail = __mmask16;
  using Consts = Epilogue512Consts;

  static Tail MakeTail(int64_t count) {
    return count >= 16 ? static_cast<__mmask16>(0xFFFF)
                       : static_cast<__mmask16>((1u << count) - 1);
  }
  static Acc Zero() { return _mm512_setzero_si512(); }
  static Acc Add(Acc a, Acc b) { return _mm512_add_epi32(a, b); }
  template <bool kFull>
  static X Load(const int8_t* p, Tail mask) {
    if (kFull) {
      return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
    return _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, p));
  }
  static W LoadW(const int32_t* w) { return _mm512_loadu_si512(w); }
  static void Mac(Acc* a, X x, W w) { *a = _mm512_dpwssd_epi32(*a, x, w); }
  static Consts MakeConsts(const DirectRowArgs& d) {
    Consts k = MakeEpilogue512Consts(d.side_scale, d.lo, d.hi);
    k.clamp_hi = d.clamp_hi;
    return k;
  }
  static void Store(Acc a, const float* scale, const float* bias,
                    const int8_t* side, const Consts& k, Tail mask, int8_t* out) {
    if (k.clamp_hi) {
      Epilogue16Natural<true>(a, scale, bias, side, k, mask, out);
    } else {
      Epilogue16Natural<false>(a, scale, bias, side, k, mask, out);
    }
  }
  // Four pixels, ld bytes apart (DepthwiseRowKernel::StoreRun): one
  // Epilogue16x4Natural instead of four Epilogue16Natural. One Zen 5
  // thread, bench_core, alternated: 56x56x144 b1 -4%, b8 -9% (its last 16
  // channels run this kernel), 28x28x48 -6%.
  static void Store4(const Acc* a, const float* scale, const float* bias,
                     const int8_t* side, int64_t ld, const Consts& k, Tail mask,
                     int8_t* out) {
    if (k.clamp_hi) {
      Epilogue16x4Natural<true>(a[0], a[1], a[2], a[3], scale, bias, side, ld, k,
                                mask, out);
    } else {
      Epilogue16x4Natural<false>(a[0], a[1], a[2], a[3], scale, bias, side, ld, k,
                                 mask, out);
    }
  }
  // Interior block widths: 8 pixels for 3-wide stride 1 (10 loads and 24
  // VPDPWSSD per filter row, 8 chains) and 7-wide stride 1 (14 loads and 56
  // VPDPWSSD), else 4.
  template <int kKw, int kSw>
  static constexpr int Pixels() {
    return (kKw == 3 || kKw == 7) && kSw == 1 ? 8 : 4;
  }
};

using Rows16 = DepthwiseRowKernel<Zmm16>;

// ------------------------------------------------ 3x3 interior, u8 VPDPBUSD

constexpr int64_t kBlock = 64;

// A block's channels (natural order) as a byte mask for a call of cc
// channels: all 64, or the cc of a partial block (the 3x3 and KxK blocks
// of fewer than 64 channels).
inline __mmask64 BlockMask(int64_t cc) {
  return cc >= kBlock ? ~__mmask64{0} : (__mmask64{1} << cc) - 1;
}
// Runs of at least this many full stride-1 pairs go through PairsS1 (a
// pair loads and byte-unpacks two columns a filter row instead of four).
// bench_core, one Zen 5 thread, pinned filters, old and new binaries
// alternated twice: 56x56x128 53-55 -> 42-45 us, 56x56x144 65-67 -> 53-54
// us (batch 8 525-530 -> 432-435 us), 28x28x192 20.0 -> 16.7 us, 14x14x576
// 15.2 -> 13.7 us, 14x14x384 9.7 -> 8.8 us, 7x7x960 6.8 -> 6.7 us (two
// pairs a row), 112x112x32 (the half block, Multi) unchanged.
constexpr int64_t kMinPairsS1 = 2;
// Half blocks at stride 1 whose parts have at least this many pixels (two
// pairs) run MultiRunS1. bench_core, one Zen 5 thread, pinned filters,
// against Multi, alternated twice: 112x112x32 58-61 -> 52 us at batch 1,
// 482-551 -> 402-428 us at batch 8; 56x56x160 65-68 -> 63 us. The quarter
// block (56x56x144's last 16 channels), whose columns take four loads and
// three inserts each, was unchanged by it (52-53 -> 53-54 us), so it keeps
// Multi.
constexpr int64_t kMinPartPixels = 4;

// The four interleaved dword vectors of four 64-channel pixel vectors (x ^
// 0x80 applied): u[j] lane L dword i = bytes (r0, r1, r2, r3) of channel
// 16L + 4j + i.
inline void Interleave4(__m512i r0, __m512i r1, __m512i r2, __m512i r3,
                        __m512i u[4]) {
  const __m512i t0 = _mm512_unpacklo_epi8(r0, r1);
  const __m512i t1 = _mm512_unpackhi_epi8(r0, r1);
  const __m512i t2 = _mm512_unpacklo_epi8(r2, r3);
  const __m512i t3 = _mm512_unpackhi_epi8(r2, r3);
  u[0] = _mm512_unpacklo_epi16(t0, t2);
  u[1] = _mm512_unpackhi_epi16(t0, t2);
  u[2] = _mm512_unpacklo_epi16(t1, t3);
  u[3] = _mm512_unpackhi_epi16(t1, t3);
}

// One 64-channel block's operands in the interleaved lane order, per filter
// row ky: the weight dwords of pixel ox (a), of pixel ox + 1 (b: stride 1
// (0, w0, w1, w2); stride 2 (0, 0, w0, w1)), stride 2's E weights
// (w2, 0, 0, 0) (e), and -128 * (w0 + w1 + w2) (corr), summed over the
// three rows in corr_all (every row inside the image).
struct alignas(64) Block3x3 {
  __m512i a[3][4], b[3][4], e[3][4], corr[3][4], corr_all[4];
  float scale[kBlock], bias[kBlock];
};

// A half block: 32 channels after the full blocks (cc % 64 >= 32). Its
// zmm hold the 32 channels twice, two pixel pairs side by side: 256-bit
// half 0 the pair (ox, ox + 1), half 1 the pair (ox + 2, ox + 3) (see
// Interior3x3::Multi).
inline int64_t HalfBlocks(int64_t cc) { return cc % kBlock >= kBlock / 2 ? 1 : 0; }

// A quarter block: 16 channels after those (cc % 32 >= 16), four pixel
// pairs side by side, one per 128-bit lane; stride 1 only. MobileNetV2's
// 144 channels are 2 full blocks and a quarter: run by the 16-channel
// kernel, those 16 channels took as long as 40 of the blocks' channels.
// bench_core, one Zen 5 thread, 32 rotating filters, best of 6
// alternated: 56x56x144 101 -> 85 us, at batch 8 897 -> 704 us;
// 112x112x16 51.6 -> 50.5 us. At stride 2 (a group of 8
// pixels spans 17 columns, 20 loads and 15 inserts a filter row) it was
// slower than the 16-channel kernel: 56x56x144 / 2 21.5 -> 22.4 us,
// 112x112x16 / 2 15.1 -> 16.0 us; and on narrow rows, where the borders
// and the row's last pixels (up to 7) leave few groups: 14x14x48 3.35 ->
// 3.84 us, 28x28x144 19.9 -> 20.7 us, 28x28x240 38.4 -> 38.9 us. So: stride
// 1, rows of at least 32 outputs.
inline int64_t QuarterBlocks(int64_t cc, const ConvGeometry& g) {
  return g.stride_w == 1 && g.out_w >= 32 && cc % (kBlock / 2) >= kBlock / 4 ? 1 : 0;
}

// 33-63 channels, and 17-31 at stride 1: one partial block, the full
// blocks' code under a channel mask (Interior3x3 kMasked), instead of the
// half block and the 16-channel kernel on the rest (or the half and quarter
// blocks, or the quarter block and the rest). bench_core, one Zen 4 thread,
// input non-negative, alternated twice (us): 28x28x44 at batch 8 117-162 ->
// 68-72 (NASNetMobile's), stride 2 35-37 -> 25-28; 56x56x48 43-44 -> 31-37,
// 28x28x48 16-19 -> 9-10, 112x112x48 / 2 57-60 -> 43-44, 28x28x33 16 ->
// 9-10, 28x28x63 21-22 -> 9; stride 1 28x28x22 13-14 -> 10, 56x56x22 at
// batch 8 315-324 -> 262-266, 56x56x24 35-42 -> 32-35, 56x56x17 46-55 ->
// 37-44; but 112x112x24 / 2 40-44 -> 44-49 (32 channels, the half block
// alone, stay as they are).
inline bool PartialBlock3x3(int64_t cc, const ConvGeometry& g) {
  return (cc > kBlock / 2 && cc < kBlock) ||
         (cc > kBlock / 4 && cc < kBlock / 2 && g.stride_w == 1);
}

// The 3x3 blocks: the full ones, the half and the quarter block, or the
// partial block alone.
inline int64_t Blocks3x3(int64_t cc, const ConvGeometry& g) {
  return PartialBlock3x3(cc, g) ? 1 : cc / kBlock + HalfBlocks(cc) + QuarterBlocks(cc, g);
}

// Channels per block of block index bi (64, 32 or 16).
inline int64_t BlockWidth(int64_t cc, int64_t bi) {
  const int64_t nblocks = cc / kBlock;
  return bi < nblocks ? kBlock : bi == nblocks && HalfBlocks(cc) ? kBlock / 2 : kBlock / 4;
}

// The 64 (full block), 32 (half block, repeated in both 256-bit halves) or
// 16 (quarter block, in every 128-bit lane) channels of filter row w as
// zmm bytes.
inline __m512i LoadWeights(const int8_t* w, int64_t width) {
  if (width == kBlock / 2) {
    return _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)));
  }
  if (width == kBlock / 4) {
    return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
  }
  return _mm512_loadu_si512(w);
}

// 32 bytes at lo in the low half of a zmm, 32 bytes at hi in the high half
// (the half block's two pixel pairs).
inline __m512i JoinHalves(const int8_t* lo, const int8_t* hi) {
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi)), 1);
}

// 16 bytes from each of p, p + step, p + 2 step, p + 3 step in 128-bit
// lanes 0-3 (the quarter block's four pixel pairs).
inline __m512i JoinQuarters(const int8_t* p, int64_t step) {
  auto q = [](const int8_t* a) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(a)); };
  const __m256i lo = _mm256_inserti128_si256(_mm256_castsi128_si256(q(p)), q(p + step), 1);
  const __m256i hi = _mm256_inserti128_si256(_mm256_castsi128_si256(q(p + 2 * step)),
                                             q(p + 3 * step), 1);
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// The full 64-channel blocks, the half and the quarter block (the rest of
// the channels run the 16-channel kernel): vector code, a few hundred instructions a
// block, once per filter (kDepthwisePrepAvx512Vnni, kept in the driver's
// prepared-weights cache).
void PrepareBlocks(const DepthwiseRowArgs& d, Block3x3* blocks) {
  const int64_t cc = d.channels;
  const bool s2 = d.geo->stride_w == 2;
  const __m512i zero = _mm512_setzero_si512();
  const __m512i ones = _mm512_set1_epi8(1);
  const int64_t nblocks = cc / kBlock;
  const int64_t count = Blocks3x3(cc, *d.geo);
  const bool partial = PartialBlock3x3(cc, *d.geo);
  const __mmask64 mask = BlockMask(cc);  // read where partial
  for (int64_t bi = 0; bi < count; ++bi) {
    Block3x3& blk = blocks[bi];
    const int64_t width = partial ? kBlock : BlockWidth(cc, bi);
    // The half block starts after the full ones, the quarter after both.
    const int64_t c0 = bi <= nblocks ? bi * kBlock : nblocks * kBlock + kBlock / 2;
    auto load = [&](const int8_t* w) {
      return partial ? _mm512_maskz_loadu_epi8(mask, w) : LoadWeights(w, width);
    };
    for (int j = 0; j < 4; ++j) blk.corr_all[j] = zero;
    for (int ky = 0; ky < 3; ++ky) {
      const int8_t* w = d.filter + ky * 3 * cc + c0;
      const __m512i w0 = load(w);
      const __m512i w1 = load(w + cc);
      const __m512i w2 = load(w + 2 * cc);
      Interleave4(w0, w1, w2, zero, blk.a[ky]);
      if (s2) {
        Interleave4(zero, zero, w0, w1, blk.b[ky]);
      } else {
        Interleave4(zero, w0, w1, w2, blk.b[ky]);
      }
      Interleave4(w2, zero, zero, zero, blk.e[ky]);
      for (int j = 0; j < 4; ++j) {
        // w0 + w1 + w2 per lane (u8 ones times the signed weight bytes).
        const __m512i sum = _mm512_dpbusd_epi32(zero, ones, blk.a[ky][j]);
        blk.corr[ky][j] = _mm512_sub_epi32(zero, _mm512_slli_epi32(sum, 7));
        blk.corr_all[j] = _mm512_add_epi32(blk.corr_all[j], blk.corr[ky][j]);
      }
    }
    for (int64_t p = 0; p < kBlock; ++p) {
      // The partial block's lanes past cc: channel 0's (never stored).
      const int64_t ch = c0 + ZmmU8LaneChannel(p) % width;
      blk.scale[p] = d.scale[ch < cc ? ch : 0];
      blk.bias[p] = d.bias[ch < cc ? ch : 0];
    }
  }
}

// kClampHi: the epilogue's upper clamp (Epilogue512Consts::clamp_hi),
// chosen once per call (Rows3x3). kFlip: the input bytes x become x ^ 0x80
// = x + 128 (VPDPBUSD's u8 operand), padding columns 0x80 (a zero
// activation), and the accumulators start at the rows' -128 * (w0 + w1 +
// w2) corrections; without it (an input known to be in [0, 127],
// DepthwiseRowArgs::input_non_negative) the bytes are u8 as they are,
// padding is 0 and the accumulators start at zero: the same sums, one VPXORD
// a column vector less.
// x ^ 0x80 (x + 128, VPDPBUSD's u8 operand) where kFlip, else x: the block
// interiors' input bytes and padding columns.
template <bool kFlip>
inline __m512i FlipU8(__m512i x) {
  return kFlip ? _mm512_xor_si512(x, _mm512_set1_epi8(static_cast<char>(0x80))) : x;
}

// What the block interiors (Interior3x3, InteriorKxK) know of the call,
// the block and the output row they are on.
template <typename Block>
struct BlockRow {
  const DepthwiseRowArgs* d;
  const Block* blk;
  const Epilogue512Consts* k;
  const int8_t* image;  // the row's batch element
  int64_t iy0, ky0, ky1;
  int64_t c0;
  int8_t* out_row;
  const int8_t* side_row;

  // Output row r of the call (image n = r / out_h, row oy = r % out_h).
  void SetRow(int64_t r) {
    const ConvGeometry& g = *d->geo;
    const int64_t cc = d->channels;
    const int64_t n = r / g.out_h, oy = r % g.out_h;
    image = d->input + n * g.in_h * g.in_w * cc;
    iy0 = oy * g.stride_h - g.pad_top;
    ky0 = d->ky_range[2 * oy];
    ky1 = d->ky_range[2 * oy + 1];
    out_row = d->output + r * g.out_w * cc;
    side_row = d->side != nullptr ? d->side + r * g.out_w * cc : nullptr;
  }
};

// kMasked: the partial block (PartialBlock3x3): every load and store under
// `mask`, its channels; it runs Run's full-block code only (not Multi).
template <bool kClampHi, bool kFlip, bool kMasked = false>
struct Interior3x3 : BlockRow<Block3x3> {
  __m512i shuffle_e[4];  // byte 4j + i of each lane to dword i's low byte
  __mmask64 mask = ~__mmask64{0};  // the partial block's channels (kMasked)

  __m512i Load(const int8_t* p) const {
    return Flip(kMasked ? _mm512_maskz_loadu_epi8(mask, p) : _mm512_loadu_si512(p));
  }

  static __m512i Flip(__m512i x) { return FlipU8<kFlip>(x); }

  // By value and inlined: GCC 12 made it a call taking the accumulators
  // through the stack (with a vzeroupper per pixel).
  __attribute__((always_inline)) void Store(__m512i a0, __m512i a1, __m512i a2,
                                            __m512i a3, int64_t ox) const {
    const int64_t o = ox * d->channels + c0;
    Epilogue64<kClampHi>(a0, a1, a2, a3, blk->scale, blk->bias,
                         side_row != nullptr ? side_row + o : nullptr, *k,
                         kMasked ? mask : ~__mmask64{0}, out_row + o);
  }

  // Both pixels' accumulators start at the +128 correction of the valid
  // filter rows (all three: corr_all).
  template <bool kFullRows>
  __attribute__((always_inline)) void StartAccumulators(__m512i acc0[4],
                                                        __m512i acc1[4]) const {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      if (!kFlip) {
        acc0[j] = _mm512_setzero_si512();
      } else if (kFullRows || ky1 - ky0 == 3) {
        acc0[j] = blk->corr_all[j];
      } else {
        acc0[j] = _mm512_setzero_si512();
        for (int64_t ky = ky0; ky < ky1; ++ky) {
          acc0[j] = _mm512_add_epi32(acc0[j], blk->corr[ky][j]);
        }
      }
      acc1[j] = acc0[j];
    }
  }

  // Pixels ox and (if kTwo) ox + 1, stride kS. kChecked: some input column
  // of the pair may lie outside the image (a border pixel, its window partly
  // in the padding): such a column is the vector of zero activations, which
  // after the +128 is 0x80 in every byte, so that its taps add 128 * w and
  // the row's correction -128 * (w0 + w1 + w2) takes them off again: the
  // padding counts exactly zero, as in the reference (without kFlip the
  // column is 0 and there is no correction). Unchecked pairs read every
  // column from the image.
  // kTwo: the pair has both pixels; kFullRows: all three filter rows lie
  // inside the image (ky0 = 0, ky1 = 3). With both known at compile time
  // the filter-row loop unrolls and the eight accumulators stay in
  // registers; the general form spilled them to the stack (GCC 12), and
  // the full interior pairs are nearly all of a layer's work.
  template <int kS, bool kChecked, bool kTwo, bool kFullRows>
  __attribute__((always_inline)) void Pair(int64_t ox) const {
    const ConvGeometry& g = *d->geo;
    const int64_t cc = d->channels;
    const int64_t ix0 = ox * kS - g.pad_left;
    const __m512i padding = Flip(_mm512_setzero_si512());
    // Column c of the pair's span: from the image, or the zero activations.
    auto column = [&](int64_t row_off, int64_t c) {
      if (kChecked && (ix0 + c < 0 || ix0 + c >= g.in_w)) return padding;
      return Load(image + (row_off + c * cc));
    };
    // The +128 undone for the valid filter rows.
    __m512i acc0[4], acc1[4];
    const int64_t ky_begin = kFullRows ? 0 : ky0;
    const int64_t ky_end = kFullRows ? 3 : ky1;
    StartAccumulators<kFullRows>(acc0, acc1);
#pragma GCC unroll 3
    for (int64_t ky = ky_begin; ky < ky_end; ++ky) {
      // An offset, not a pointer: ix0 may be negative, and a column outside
      // the image is neither addressed nor read.
      const int64_t row_off = ((iy0 + ky) * g.in_w + ix0) * cc + c0;
      const __m512i x0 = column(row_off, 0), x1 = column(row_off, 1),
                    x2 = column(row_off, 2);
      // The fourth pixel meets zero weights for ox: a single pixel reuses x2
      // instead of reading a column that may lie past the image.
      const __m512i x3 = kTwo ? column(row_off, 3) : x2;
      __m512i u[4];
      Interleave4(x0, x1, x2, x3, u);
      for (int j = 0; j < 4; ++j) {
        acc0[j] = _mm512_dpbusd_epi32(acc0[j], u[j], blk->a[ky][j]);
      }
      if constexpr (kTwo) {
        __m512i e[4];
        if (kS == 2) {
          const __m512i x4 = column(row_off, 4);
          for (int j = 0; j < 4; ++j) e[j] = _mm512_shuffle_epi8(x4, shuffle_e[j]);
        }
        for (int j = 0; j < 4; ++j) {
          acc1[j] = _mm512_dpbusd_epi32(acc1[j], u[j], blk->b[ky][j]);
          if (kS == 2) acc1[j] = _mm512_dpbusd_epi32(acc1[j], e[j], blk->e[ky][j]);
        }
      }
    }
    Store(acc0[0], acc0[1], acc0[2], acc0[3], ox);
    if constexpr (kTwo) Store(acc1[0], acc1[1], acc1[2], acc1[3], ox + 1);
  }

  // The half block (kG = 2: 32 channels at c0, pixels ox .. ox + 3) or the
  // quarter block (kG = 4: 16 channels, pixels ox .. ox + 7), every input
  // column inside the image. Each zmm holds kG pixel pairs, one per
  // 512 / kG bits: pair k = (ox + 2k, ox + 2k + 1), its columns 2 * kS * k
  // to the right of pair 0's, so that Pair's arithmetic (weights and
  // corrections repeated in every part) runs on all 64 lanes: per filter
  // row 4 (5) column vectors, 8 unpacks and 8 (12) VPDPBUSD for 2 * kG
  // pixels of 64 / kG channels, the full blocks' cost per output.
  // Epilogue64 gives pixels ox + 2k in part k of b0 and ox + 2k + 1 in b1.
  template <int kS, bool kFullRows, int kG>
  __attribute__((always_inline)) void Multi(int64_t ox) const {
    static_assert(kG == 2 || kG == 4, "two or four pairs");
    const ConvGeometry& g = *d->geo;
    const int64_t cc = d->channels;
    const int64_t ix0 = ox * kS - g.pad_left;
    const int64_t step = 2 * kS * cc;  // from one pair's columns to the next's
    auto join = [&](const int8_t* p, int64_t ld) {  // part k from p + k * ld
      return kG == 2 ? JoinHalves(p, p + ld) : JoinQuarters(p, ld);
    };
    auto pair_cols = [&](const int8_t* p) { return Flip(join(p, step)); };
    __m512i acc0[4], acc1[4];
    StartAccumulators<kFullRows>(acc0, acc1);
    const int64_t ky_begin = kFullRows ? 0 : ky0;
    const int64_t ky_end = kFullRows ? 3 : ky1;
#pragma GCC unroll 3
    for (int64_t ky = ky_begin; ky < ky_end; ++ky) {
      const int8_t* p = image + ((iy0 + ky) * g.in_w + ix0) * cc + c0;
      __m512i u[4];
      Interleave4(pair_cols(p), pair_cols(p + cc), pair_cols(p + 2 * cc),
                  pair_cols(p + 3 * cc), u);
      __m512i e[4];
      if (kS == 2) {
        const __m512i x4 = pair_cols(p + 4 * cc);
        for (int j = 0; j < 4; ++j) e[j] = _mm512_shuffle_epi8(x4, shuffle_e[j]);
      }
      for (int j = 0; j < 4; ++j) {
        acc0[j] = _mm512_dpbusd_epi32(acc0[j], u[j], blk->a[ky][j]);
        acc1[j] = _mm512_dpbusd_epi32(acc1[j], u[j], blk->b[ky][j]);
        if (kS == 2) acc1[j] = _mm512_dpbusd_epi32(acc1[j], e[j], blk->e[ky][j]);
      }
    }
    StoreParts<kG>(acc0, acc1, ox, 2 * cc);
  }

  // Multi's and MultiRunS1's epilogue: part k of acc0 is pixel ox + k *
  // part_ld / cc, of acc1 the pixel after it (part_ld: bytes from one part's
  // pixels to the next's).
  template <int kG>
  __attribute__((always_inline)) void StoreParts(const __m512i acc0[4], const __m512i acc1[4],
                                                 int64_t ox, int64_t part_ld) const {
    const int64_t cc = d->channels;
    auto join = [&](const int8_t* p) {  // part k from p + k * part_ld
      return kG == 2 ? JoinHalves(p, p + part_ld) : JoinQuarters(p, part_ld);
    };
    const int64_t o = ox * cc + c0;
    __m512i side0, side1;
    if (side_row != nullptr) {
      side0 = join(side_row + o);
      side1 = join(side_row + o + cc);
    }
    const bool side = side_row != nullptr;
    const __m512i b0 = Epilogue64Bytes<kClampHi>(acc0[0], acc0[1], acc0[2], acc0[3],
                                                 blk->scale, blk->bias,
                                                 side ? &side0 : nullptr, *k);
    const __m512i b1 = Epilogue64Bytes<kClampHi>(acc1[0], acc1[1], acc1[2], acc1[3],
                                                 blk->scale, blk->bias,
                                                 side ? &side1 : nullptr, *k);
    int8_t* q = out_row + o;
    if (kG == 2) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm512_castsi512_si256(b0));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + cc), _mm512_castsi512_si256(b1));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + part_ld),
                          _mm512_extracti64x4_epi64(b0, 1));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + part_ld + cc),
                          _mm512_extracti64x4_epi64(b1, 1));
    } else {
      auto store = [](int8_t* at, __m128i v) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(at), v);
      };
      store(q, _mm512_castsi512_si128(b0));
      store(q + cc, _mm512_castsi512_si128(b1));
      store(q + part_ld, _mm512_extracti32x4_epi32(b0, 1));
      store(q + part_ld + cc, _mm512_extracti32x4_epi32(b1, 1));
      store(q + 2 * part_ld, _mm512_extracti32x4_epi32(b0, 2));
      store(q + 2 * part_ld + cc, _mm512_extracti32x4_epi32(b1, 2));
      store(q + 3 * part_ld, _mm512_extracti32x4_epi32(b0, 3));
      store(q + 3 * part_ld + cc, _mm512_extracti32x4_epi32(b1, 3));
    }
  }

  // Stride 1, all three filter rows inside, the half block (kG = 2; the
  // quarter, kG = 4, works too but measured no faster: kMinPartPixels) over
  // [ox, ox_end) (a multiple of 2 * kG pixels, every window inside the
  // image): part k of each zmm walks its own stretch of
  // part = (ox_end - ox) / kG pixels from ox + k * part, a pair at a time,
  // so that, as in PairsS1, a pair's last two columns are the next pair's
  // first two and their byte unpacks are kept: two column vectors (joined
  // from kG parts) and two byte unpacks a filter row instead of Multi's
  // four and four.
  template <int kG>
  __attribute__((always_inline)) void MultiRunS1(int64_t ox, int64_t ox_end) const {
    const int64_t cc = d->channels;
    const int64_t part_ld = (ox_end - ox) / kG * cc;
    KeptRun(
        ox, (ox_end - ox) / kG / 2,
        [&](const int8_t* p) __attribute__((always_inline)) {
          // part k from p + k * part_ld, flipped (kFlip)
          return Flip(kG == 2 ? JoinHalves(p, p + part_ld) : JoinQuarters(p, part_ld));
        },
        [&](const __m512i acc0[4], const __m512i acc1[4], int64_t o)
            __attribute__((always_inline)) { StoreParts<kG>(acc0, acc1, o, part_ld); });
  }

  // The half (kG = 2) or quarter (kG = 4) block's groups of 2 * kG pixels
  // in [ox, ox_end) (ox_end - ox a multiple of 2 * kG).
  template <int kS, int kG>
  void RunMulti(int64_t ox, int64_t ox_end) const {
    if (kS == 1 && kG == 2 && ky0 == 0 && ky1 == 3 && ox_end - ox >= kMinPartPixels * kG) {
      MultiRunS1<kG>(ox, ox_end);
      return;
    }
    if (ky0 == 0 && ky1 == 3) {
      for (; ox < ox_end; ox += 2 * kG) Multi<kS, true, kG>(ox);
    } else {
      for (; ox < ox_end; ox += 2 * kG) Multi<kS, false, kG>(ox);
    }
  }

  // Stride 2, `pairs` full pairs from ox whose columns ix0 .. ix0 + 7 all
  // lie inside the image, all three filter rows valid. Pair ox's E column
  // (ix0 + 4) is the first column of the next pair's D, so its E term is
  // that D times the E weights (w2, 0, 0, 0): the same products as Pair's
  // (the D's other three bytes meet zero weights), with the D kept from one
  // pair to the next instead of the 4 VPSHUFB and the extra load per
  // filter row.
  __attribute__((always_inline)) void PairsS2(int64_t ox, int64_t pairs) const {
    const ConvGeometry& g = *d->geo;
    const int64_t cc = d->channels;
    const int8_t* base = image + (iy0 * g.in_w + ox * 2 - g.pad_left) * cc + c0;
    const int64_t row = g.in_w * cc;
    __m512i u[3][4];
#pragma GCC unroll 3
    for (int ky = 0; ky < 3; ++ky) {
      const int8_t* p = base + ky * row;
      Interleave4(Load(p), Load(p + cc), Load(p + 2 * cc), Load(p + 3 * cc), u[ky]);
    }
    for (int64_t i = 0; i < pairs; ++i, ox += 2, base += 4 * cc) {
      __m512i acc0[4], acc1[4];
      StartAccumulators<true>(acc0, acc1);
#pragma GCC unroll 3
      for (int ky = 0; ky < 3; ++ky) {
        const int8_t* p = base + ky * row + 4 * cc;
        __m512i n[4];
        Interleave4(Load(p), Load(p + cc), Load(p + 2 * cc), Load(p + 3 * cc), n);
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          acc0[j] = _mm512_dpbusd_epi32(acc0[j], u[ky][j], blk->a[ky][j]);
          acc1[j] = _mm512_dpbusd_epi32(acc1[j], u[ky][j], blk->b[ky][j]);
          acc1[j] = _mm512_dpbusd_epi32(acc1[j], n[j], blk->e[ky][j]);
          u[ky][j] = n[j];
        }
      }
      Store(acc0[0], acc0[1], acc0[2], acc0[3], ox);
      Store(acc1[0], acc1[1], acc1[2], acc1[3], ox + 1);
    }
  }

  // One filter row ky of a pair whose first two columns' byte unpacks were
  // kept (*lo, *hi; PairsS1, MultiRunS1): with columns 2 and 3 (r2, r3, x ^
  // 0x80) they make the pair's D (as Interleave4(x0, x1, x2, x3)), both
  // pixels take their VPDPBUSD, and columns 2 and 3's unpacks are kept for
  // the next pair.
  __attribute__((always_inline)) void KeptStep(int ky, __m512i r2, __m512i r3, __m512i* lo,
                                               __m512i* hi, __m512i acc0[4],
                                               __m512i acc1[4]) const {
    const __m512i t2 = _mm512_unpacklo_epi8(r2, r3);
    const __m512i t3 = _mm512_unpackhi_epi8(r2, r3);
    __m512i u[4];
    u[0] = _mm512_unpacklo_epi16(*lo, t2);
    u[1] = _mm512_unpackhi_epi16(*lo, t2);
    u[2] = _mm512_unpacklo_epi16(*hi, t3);
    u[3] = _mm512_unpackhi_epi16(*hi, t3);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      acc0[j] = _mm512_dpbusd_epi32(acc0[j], u[j], blk->a[ky][j]);
      acc1[j] = _mm512_dpbusd_epi32(acc1[j], u[j], blk->b[ky][j]);
    }
    *lo = t2;
    *hi = t3;
  }

  // Stride 1, `pairs` full pairs from ox whose columns ix0 .. ix0 + 2 *
  // pairs + 1 all lie inside the image, all three filter rows valid. Pair
  // ox's D is Interleave4 of columns ix0 .. ix0 + 3; the next pair's starts
  // two columns on, so its first byte unpacks (of columns ix0 + 2, ix0 + 3)
  // are this pair's second ones: kept from one pair to the next, a pair
  // loads and byte-unpacks two columns a filter row instead of four.
  __attribute__((always_inline)) void PairsS1(int64_t ox, int64_t pairs) const {
    KeptRun(
        ox, pairs, [&](const int8_t* p) __attribute__((always_inline)) { return Load(p); },
        [&](const __m512i acc0[4], const __m512i acc1[4], int64_t o)
            __attribute__((always_inline)) {
          Store(acc0[0], acc0[1], acc0[2], acc0[3], o);
          Store(acc1[0], acc1[1], acc1[2], acc1[3], o + 1);
        });
  }

  // A stride-1 run of `steps` pairs from ox, all three filter rows inside
  // (PairsS1, MultiRunS1): col(p) reads the column vector whose first
  // byte is p (x ^ 0x80), store(acc0, acc1, o) stores pair o's two pixels.
  // Each pair's first two columns' byte unpacks are the pair before's last
  // two, kept (KeptStep).
  template <class Col, class StorePair>
  __attribute__((always_inline)) void KeptRun(int64_t ox, int64_t steps, Col col,
                                              StorePair store) const {
    const ConvGeometry& g = *d->geo;
    const int64_t cc = d->channels;
    const int8_t* base = image + (iy0 * g.in_w + ox - g.pad_left) * cc + c0;
    const int64_t row = g.in_w * cc;
    __m512i lo[3], hi[3];  // per filter row: the pair's first two columns
#pragma GCC unroll 3
    for (int ky = 0; ky < 3; ++ky) {
      const int8_t* p = base + ky * row;
      const __m512i r0 = col(p), r1 = col(p + cc);
      lo[ky] = _mm512_unpacklo_epi8(r0, r1);
      hi[ky] = _mm512_unpackhi_epi8(r0, r1);
    }
    for (int64_t i = 0; i < steps; ++i, ox += 2, base += 2 * cc) {
      __m512i acc0[4], acc1[4];
      StartAccumulators<true>(acc0, acc1);
#pragma GCC unroll 3
      for (int ky = 0; ky < 3; ++ky) {
        const int8_t* p = base + ky * row + 2 * cc;
        KeptStep(ky, col(p), col(p + cc), &lo[ky], &hi[ky], acc0, acc1);
      }
      store(acc0, acc1, ox);
    }
  }

  // Output columns [ox, ox_end) in pairs (RunColumns), on a local copy of
  // *this: the kernels store int8 bytes, which may alias any object in
  // memory, so through `this` GCC reloaded the members (d, blk, out_row,
  // c0, ...) after every pixel pair's store; a local whose address never
  // leaves the function cannot be aliased. bench_core, one Zen 5 thread,
  // medians of 7 alternated: stride 1, 56x56x144 53.9 -> 46.9 us, 28x28x192
  // 16.5 -> 14.6, 14x14x384 9.2 -> 8.5, 14x14x576 13.4 -> 12.5, 7x7x960 6.6
  // -> 6.2; stride 2 unchanged. The same copy in RunMulti made 112x112x32
  // (a half block) 7% slower, and in the avxvnni kernel changed nothing:
  // neither has it.
  template <int kS>
  void Run(int64_t ox, int64_t ox_end) const {
    const Interior3x3 self = *this;
    self.template RunColumns<kS>(ox, ox_end);
  }

  // As Run, on the object it is called on; a pair whose span (columns ix0
  // .. ix0 + (two ? kS + 2 : 2)) leaves the image takes the checked loads.
  template <int kS>
  __attribute__((always_inline)) void RunColumns(int64_t ox, int64_t ox_end) const {
    const ConvGeometry& g = *d->geo;
    for (; ox < ox_end; ox += 2) {
      const bool two = ox + 1 < ox_end;
      const int64_t ix0 = ox * kS - g.pad_left;
      const int64_t last = ix0 + (two ? kS + 2 : 2);
      if (kS == 2 && ky0 == 0 && ky1 == 3 && ix0 >= 0) {
        // Full pairs whose columns up to ix0 + 7 are in the image.
        const int64_t by_width = (g.in_w - 8 - ix0) / 4 + 1;
        const int64_t pairs = ix0 + 7 < g.in_w ? Min(by_width, (ox_end - ox) / 2) : 0;
        // Runs of at least 3 pairs: a run loads one D more than it uses
        // (bench_core, one Zen 5 thread, 32 rotating filters, best of 8
        // alternated with the shuffled E: 112x112x96 / 2 83.8 -> 77.8 us,
        // 56x56x192 / 2 30.9 -> 26.2 us, 56x56x144 / 2 (whose last 16
        // channels run the 16-channel kernel) unchanged; 14x14x576 / 2, two
        // such pairs a row, ran 6% slower with runs of 2).
        if (pairs >= 3) {
          PairsS2(ox, pairs);
          ox += 2 * pairs - 2;
          continue;
        }
      }
      if (kS == 1 && ky0 == 0 && ky1 == 3 && ix0 >= 0 && ix0 + 3 < g.in_w) {
        // Full pairs whose columns up to ix0 + 2 * pairs + 1 are in the image.
        const int64_t pairs = Min((g.in_w - 4 - ix0) / 2 + 1, (ox_end - ox) / 2);
        if (pairs >= kMinPairsS1) {
          PairsS1(ox, pairs);
          ox += 2 * pairs - 2;
          continue;
        }
      }
      if (ix0 >= 0 && last < g.in_w) {
        if (!two) {
          Pair<kS, false, false, false>(ox);
        } else if (ky0 == 0 && ky1 == 3) {
          Pair<kS, false, true, true>(ox);
        } else {
          Pair<kS, false, true, false>(ox);
        }
      } else if (two) {
        Pair<kS, true, true, false>(ox);
      } else {
        Pair<kS, true, false, false>(ox);
      }
    }
  }
};

bool Use3x3Interior(const DepthwiseRowArgs& d) {
  const ConvGeometry& g = *d.geo;
  return d.channels >= kBlock / 4 && g.filter_h == 3 && g.filter_w == 3 &&
         g.dilation_h == 1 && g.dilation_w == 1 &&
         (g.stride_w == 1 || g.stride_w == 2);
}

// Points `in` (an Interior3x3) at the call and its epilogue constants, with
// the stride-2 E shuffles.
template <typename In>
void StartInterior3x3(const DepthwiseRowArgs& d, const Epilogue512Consts& k, In* in) {
  in->d = &d;
  in->k = &k;
  for (int j = 0; j < 4; ++j) {
    alignas(64) int8_t idx[64];
    DwordSpreadShuffle(j, /*at=*/0, /*lanes=*/4, idx);
    in->shuffle_e[j] = _mm512_load_si512(idx);
  }
}

// in's block (a full or the partial one) over the call's rows: every
// column, borders too (checked loads there).
template <typename In>
void BlockRows3x3(const DepthwiseRowArgs& d, In& in) {
  for (int64_t r = d.row_begin; r < d.row_end; ++r) {
    in.SetRow(r);
    if (d.geo->stride_w == 1) {
      in.template Run<1>(0, d.geo->out_w);
    } else {
      in.template Run<2>(0, d.geo->out_w);
    }
  }
}

template <bool kClampHi, bool kFlip>
void Rows3x3(const DepthwiseRowArgs& d) {
  const ConvGeometry& g = *d.geo;
  const int64_t cc = d.channels;
  const int64_t nblocks = cc / kBlock;
  std::vector<Block3x3> local;
  const Block3x3* blocks = PreparedBlocks(d.prepared, Blocks3x3(cc, g), &local,
                                          [&](Block3x3* b) { PrepareBlocks(d, b); });
  const Epilogue512Consts k = Zmm16::MakeConsts(d);
  if (PartialBlock3x3(cc, g)) {
    // The partial block: every column as a full block runs them.
    Interior3x3<kClampHi, kFlip, true> in;
    StartInterior3x3(d, k, &in);
    in.blk = &blocks[0];
    in.c0 = 0;
    in.mask = BlockMask(cc);
    BlockRows3x3(d, in);
    return;
  }
  Rows16::RunFn run_full, run_part;
  Rows16::PickInterior(g, &run_full, &run_part);
  Interior3x3<kClampHi, kFlip> in;
  StartInterior3x3(d, k, &in);
  const int64_t c_split = nblocks * kBlock;
  const int64_t half = HalfBlocks(cc);
  const int64_t quarter = QuarterBlocks(cc, g);
  const int64_t c_rest = c_split + half * (kBlock / 2) + quarter * (kBlock / 4);
  // The channels past the full, half and quarter blocks (cc % 16): the
  // one-tap-per-lane kernel, borders included.
  if (c_rest < cc) Rows16::RestChannels(d, k, c_rest);
  // Blocks outer, rows inner: a block's weights (2-4 KiB) and the three
  // input rows of its 64 channels stay in L1 from one output row to the
  // next. Rows outer cycled every block's weights (3.8 KiB each; 34 KiB for
  // 576 channels) and 3 full input rows through the 32 KiB L1 per row.
  for (int64_t bi = 0; bi < nblocks; ++bi) {
    in.blk = &blocks[bi];
    in.c0 = bi * kBlock;
    BlockRows3x3(d, in);
  }
  // The half block (kG = 2 pixel pairs a zmm) and the quarter block
  // (kG = 4): groups of 2 * kG pixels whose columns all lie inside the
  // image, from the first ox with ox * s >= pad_left, while the group's
  // last column (ox + 2 kG - 1) * s - pad_left + 2 is inside; the other
  // columns (borders, the row's last pixels) run the 16-channel kernel.
  auto run_part_block = [&](int64_t bi, int64_t c0, int64_t width, auto kg) {
    constexpr int kG = decltype(kg)::value;
    const int64_t s = g.stride_w;
    const int64_t q0 = (g.pad_left + s - 1) / s;
    const int64_t room = g.in_w - 3 + g.pad_left;  // (ox + 2kG - 1) * s <= room
    const int64_t q_last =
        room < 0 ? -1 : Min(room / s - (2 * kG - 1), g.out_w - 2 * kG);
    const int64_t groups = q_last >= q0 ? (q_last - q0) / (2 * kG) + 1 : 0;
    const int64_t q1 = q0 + 2 * kG * groups;
    in.blk = &blocks[bi];
    in.c0 = c0;
    for (int64_t r = d.row_begin; r < d.row_end; ++r) {
      in.SetRow(r);
      if (q0 > 0 || groups == 0) {
        Rows16::Row(d, k, run_full, run_part, r, 0, groups ? q0 : g.out_w, c0,
                    c0 + width);
      }
      if (groups > 0) {
        if (s == 1) {
          in.template RunMulti<1, kG>(q0, q1);
        } else {
          in.template RunMulti<2, kG>(q0, q1);
        }
        if (q1 < g.out_w) {
          Rows16::Row(d, k, run_full, run_part, r, q1, g.out_w, c0, c0 + width);
        }
      }
    }
  };
  if (half) {
    run_part_block(nblocks, c_split, kBlock / 2, std::integral_constant<int, 2>());
  }
  if (quarter) {
    run_part_block(nblocks + half, c_split + half * (kBlock / 2), kBlock / 4,
                   std::integral_constant<int, 4>());
  }
}

// ------------------------------------- 5x5 and 7x7 interior, u8 VPDPBUSD
//
// KxK, K = 5 or 7, stride 1 or 2, dilation 1 (EfficientNet's and
// MobileNetV3's 5x5 depthwise layers, NASNet's 5x5 and 7x7, ConvNeXt's
// 7x7), 64 channels a block: as the 3x3 interior, a lane holds four
// horizontally adjacent input pixels of one channel, kDwords = (K + 6) / 4
// such dwords per filter row and 64 channels (D_q = columns ix0 + 4q ..
// ix0 + 4q + 3, 8 unpacks each; 5x5: 2, 7x7: 3), and output pixel ox + p,
// whose window starts r = kS * p columns into them, is the sum over q of
// D_q . w_r,q, lane i of w_r,q holding tap 4q + i - r of the row (zero
// outside [0, K)). 5x5:
//   r = 0: w_0,0 = (w0, w1, w2, w3), w_0,1 = (w4, 0, 0, 0)
//   r = 1: w_1,0 = (0, w0, w1, w2), w_1,1 = (w3, w4, 0, 0)
//   r = 2: w_2,0 = (0, 0, w0, w1), w_2,1 = (w2, w3, w4, 0)
//   r = 3: w_3,0 = (0, 0, 0, w0), w_3,1 = (w1, w2, w3, w4)
// A group of 4 pixels at stride 1 spans K + 3 columns, 2 pixels at stride
// 2 K + 2: both fit kDwords dwords (7x7 reads 12 columns for 10 or 9; the
// extra ones meet zero weights). So a group of 4 pixels (stride 1) costs
// 4 * kDwords loads, 8 * kDwords unpacks and 16 * kDwords VPDPBUSD per
// filter row and 64 channels (2 pixels at stride 2: the same loads and
// unpacks, 8 * kDwords VPDPBUSD), where the one-tap-per-lane kernel takes
// K loads + sign extensions and K VPDPWSSD per pixel and 16 channels.
// Exactness as the 3x3 interior's: u8 (x + 128) times s8 w, four products
// summed per lane (|4 * 255 * 128| < 2^31), -128 * (w0 + ... + w_K-1)
// added per valid filter row (each of the K taps meets every pixel exactly
// once across the dwords); zero weight bytes make the other columns count
// nothing; 49 taps cannot overflow int32. Border columns are padding
// vectors (InteriorKxK). Channels: blocks of 64 (BlocksKxK), fewer than 64
// in one partial block whose loads and stores are masked to them.
template <int K>
struct alignas(64) BlockKxK {
  static constexpr int kDwords = (K + 6) / 4;
  __m512i w[K][4][kDwords][4];  // [ky][r][q][j]
  __m512i corr[K][4];           // -128 * (w0 + ... + w_K-1) of filter row ky
  float scale[kBlock], bias[kBlock];
};

constexpr int64_t kOverlapMinRest = 16;

// K (5 or 7) for a call the KxK interior runs, else 0: at least
// kOverlapMinRest + 1 channels (on 16 or fewer the 16-channel kernel is
// one vector a pixel, as cheap as a block), and a 5x5 call of fewer than 64
// channels only at stride 1. A partial block against the 16-channel
// kernel, bench_core, one Zen 4 thread, input told non-negative, batch 8,
// alternated twice (another process busy beside them): 5x5 28x28x44
// 290-291 -> 140-156 us, 28x28x22 223-273 -> 156-158; but 5x5 stride 2
// 56x56x22 220-222 -> 211-213 and 111x111x32 734-746 -> 855-898 (its two
// pixels a group leave half the block's lanes idle where the 16-channel
// kernel fills two vectors); 7x7 stride 2 111x111x32 2078-2161 -> 1651-1654,
// 56x56x22 446-450 -> 356-376; 7x7 28x28x22 444-480 -> 284-311.
int KxKInterior(const DepthwiseRowArgs& d) {
  const ConvGeometry& g = *d.geo;
  if (g.filter_h != g.filter_w || (g.filter_h != 5 && g.filter_h != 7)) return 0;
  if (g.dilation_h != 1 || g.dilation_w != 1 || (g.stride_w != 1 && g.stride_w != 2)) {
    return 0;
  }
  if (d.channels <= kOverlapMinRest) return 0;
  if (g.filter_h == 5 && g.stride_w == 2 && d.channels < kBlock) return 0;
  return static_cast<int>(g.filter_h);
}

// The KxK blocks of cc > kOverlapMinRest channels. Fewer than 64: one
// partial block, its loads and stores masked to the cc channels (5x5
// before it ran the 16-channel kernel: NASNetMobile's 44-channel 5x5
// layers). Else the full ones, and, where more than kOverlapMinRest
// channels are past them, one more over the last kBlock channels [cc -
// kBlock, cc), which overlaps the last full block (its channels there are
// computed twice, from the same operands, and stored twice with the same
// bytes: by the same thread, as every block of a row) instead of running
// the one-tap-per-lane kernel on the rest. bench_core, one Zen 4 thread,
// input told non-negative, alternated, the overlapping 5x5 block against
// the one-tap kernel on the rest: 28x28x120 (56 more) 61 -> 31-32 us,
// 28x28x88 38 -> 32, 28x28x240 80-83 -> 63-64, 14x14x672 52 -> 47,
// 14x14x480 37 -> 34, 7x7x120 7.5 -> 2.2; on 16 or 8 more it was slower
// (28x28x80 1.14x the time, 56x56x144 / 2 1.23x, 56x56x72 / 2 1.28x; 7x7x80
// 0.79x, the one exception).
int64_t BlocksKxK(int64_t cc) {
  if (cc < kBlock) return 1;
  return cc / kBlock + (cc % kBlock > kOverlapMinRest ? 1 : 0);
}
int64_t BlockKxKStart(int64_t bi, int64_t cc) {
  return cc < kBlock ? 0 : Min(bi * kBlock, cc - kBlock);
}
// The first channel past the KxK blocks.
int64_t BlocksKxKEnd(int64_t cc) { return Min(BlocksKxK(cc) * kBlock, cc); }

template <int K>
void PrepareKxK(const DepthwiseRowArgs& d, BlockKxK<K>* blocks) {
  constexpr int kD = BlockKxK<K>::kDwords;
  const int64_t cc = d.channels;
  const __mmask64 mask = BlockMask(cc);
  const __m512i zero = _mm512_setzero_si512();
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t bi = 0; bi < BlocksKxK(cc); ++bi) {
    BlockKxK<K>& blk = blocks[bi];
    const int64_t c0 = BlockKxKStart(bi, cc);
    for (int ky = 0; ky < K; ++ky) {
      __m512i w[K];
      for (int kx = 0; kx < K; ++kx) {
        w[kx] = _mm512_maskz_loadu_epi8(mask, d.filter + (ky * K + kx) * cc + c0);
      }
      // Column t of a group meets tap t - r of the pixel r columns in.
      auto tap = [&](int t) { return t >= 0 && t < K ? w[t] : zero; };
      for (int r = 0; r < 4; ++r) {
        for (int q = 0; q < kD; ++q) {
          Interleave4(tap(4 * q - r), tap(4 * q + 1 - r), tap(4 * q + 2 - r),
                      tap(4 * q + 3 - r), blk.w[ky][r][q]);
        }
      }
      for (int j = 0; j < 4; ++j) {
        // w0 + ... + w_K-1 per lane (u8 ones times the signed weight bytes).
        __m512i sum = zero;
        for (int q = 0; q < kD; ++q) sum = _mm512_dpbusd_epi32(sum, ones, blk.w[ky][0][q][j]);
        blk.corr[ky][j] = _mm512_sub_epi32(zero, _mm512_slli_epi32(sum, 7));
      }
    }
    for (int64_t p = 0; p < kBlock; ++p) {
      // A partial block's lanes past cc: channel 0's (never stored).
      const int64_t ch = c0 + ZmmU8LaneChannel(p);
      blk.scale[p] = d.scale[ch < cc ? ch : 0];
      blk.bias[p] = d.bias[ch < cc ? ch : 0];
    }
  }
}

// One 64-channel block of one output row, in groups of kP pixels (4 at
// stride 1, 2 at stride 2), borders included: a column outside the image
// is the vector of zero activations (0x80 after the flip, whose taps the
// row's correction takes off again, as in Interior3x3::Pair), and a group
// past the row's end stores only its pixels. kMasked (a partial block):
// loads and stores under the block's channel mask; full blocks load whole
// vectors. (Masked loads everywhere and the 5x5 columns loaded dword by
// dword together ran full 5x5 blocks 3-10% slower than before, bench_core,
// one Zen 4 thread, alternated three times: 28x28x240, 28x28x240 / 2,
// 14x14x672 / 2, 14x14x480 at batch 8; as written, within 0-2%.)
template <bool kClampHi, bool kFlip, int kS, int K, bool kMasked>
struct InteriorKxK : BlockRow<BlockKxK<K>> {
  using Base = BlockRow<BlockKxK<K>>;
  using Base::blk;
  using Base::c0;
  using Base::d;
  using Base::image;
  using Base::iy0;
  using Base::k;
  using Base::ky0;
  using Base::ky1;
  using Base::out_row;
  using Base::side_row;
  static constexpr int kP = kS == 1 ? 4 : 2;
  static constexpr int kD = BlockKxK<K>::kDwords;
  __m512i start[4];  // the accumulators' start: the valid rows' corrections
  __mmask64 mask = ~__mmask64{0};  // the block's channels (kMasked)

  __attribute__((always_inline)) __m512i Load(const int8_t* p) const {
    return FlipU8<kFlip>(kMasked ? _mm512_maskz_loadu_epi8(mask, p) : _mm512_loadu_si512(p));
  }

  // BlockRow::SetRow, then the accumulators' start for that row.
  void SetRow(int64_t r) {
    Base::SetRow(r);
    for (int j = 0; j < 4; ++j) {
      start[j] = _mm512_setzero_si512();
      if (kFlip) {
        for (int64_t ky = ky0; ky < ky1; ++ky) {
          start[j] = _mm512_add_epi32(start[j], blk->corr[ky][j]);
        }
      }
    }
  }

  // kFullRows: all K filter rows inside the image (a compile-time loop,
  // whose kP * 4 accumulators stay in registers); kChecked: some of the
  // 4 * kD columns may lie outside the image; npix: the pixels to store.
  template <bool kFullRows, bool kChecked>
  __attribute__((always_inline)) void Group(int64_t ox, int npix) const {
    const ConvGeometry& g = *d->geo;
    const int64_t cc = d->channels;
    const int64_t ix0 = ox * kS - g.pad_left;
    __m512i acc[kP][4];
#pragma GCC unroll 4
    for (int p = 0; p < kP; ++p) {
      for (int j = 0; j < 4; ++j) acc[p][j] = start[j];
    }
    const int64_t ky_begin = kFullRows ? 0 : ky0;
    const int64_t ky_end = kFullRows ? K : ky1;
#pragma GCC unroll 7
    for (int64_t ky = ky_begin; ky < ky_end; ++ky) {
      // An offset, not a pointer: ix0 may be negative, and a column outside
      // the image is neither addressed nor read.
      const int64_t row_off = ((iy0 + ky) * g.in_w + ix0) * cc + c0;
      auto column = [&](int c) {
        if (kChecked && (ix0 + c < 0 || ix0 + c >= g.in_w)) {
          return FlipU8<kFlip>(_mm512_setzero_si512());
        }
        return Load(image + row_off + c * cc);
      };
      // 5x5: the eight columns first, then both dwords' unpacks and
      // products (the 5x5 kernel's order before 7x7 joined it). 7x7: dword
      // by dword; its twelve columns at once leave too few registers for
      // the sixteen accumulators (bench_core, one Zen 4 thread, alternated
      // three times: 14x14x88 17-21 -> 23-28 us, 56x56x96 267-327 -> 369-423,
      // 28x28x88 / 2 at batch 8 152-179 -> 227-256).
      constexpr int kAhead = kD == 2 ? 2 : 1;
#pragma GCC unroll 3
      for (int q0 = 0; q0 < kD; q0 += kAhead) {
        __m512i u[kAhead][4];
        __m512i x[4 * kAhead];
#pragma GCC unroll 8
        for (int c = 0; c < 4 * kAhead; ++c) x[c] = column(4 * q0 + c);
#pragma GCC unroll 2
        for (int a = 0; a < kAhead; ++a) {
          Interleave4(x[4 * a], x[4 * a + 1], x[4 * a + 2], x[4 * a + 3], u[a]);
        }
#pragma GCC unroll 4
        for (int p = 0; p < kP; ++p) {
          const int r = kS * p;
#pragma GCC unroll 4
          for (int j = 0; j < 4; ++j) {
#pragma GCC unroll 2
            for (int a = 0; a < kAhead; ++a) {
              acc[p][j] = _mm512_dpbusd_epi32(acc[p][j], u[a][j], blk->w[ky][r][q0 + a][j]);
            }
          }
        }
      }
    }
#pragma GCC unroll 4
    for (int p = 0; p < kP; ++p) {
      if (p >= npix) break;
      const int64_t o = (ox + p) * cc + c0;
      Epilogue64<kClampHi>(acc[p][0], acc[p][1], acc[p][2], acc[p][3], blk->scale,
                           blk->bias, side_row != nullptr ? side_row + o : nullptr, *k,
                           kMasked ? mask : ~__mmask64{0}, out_row + o);
    }
  }

  template <bool kFullRows>
  void RunRows(int64_t out_w) const {
    const ConvGeometry& g = *d->geo;
    for (int64_t ox = 0; ox < out_w; ox += kP) {
      const int64_t ix0 = ox * kS - g.pad_left;
      const int npix = static_cast<int>(Min(static_cast<int64_t>(kP), out_w - ox));
      if (ix0 >= 0 && ix0 + 4 * kD - 1 < g.in_w) {
        Group<kFullRows, false>(ox, npix);
      } else {
        Group<kFullRows, true>(ox, npix);
      }
    }
  }

  void Run(int64_t out_w) const {
    if (ky1 - ky0 == K) {
      RunRows<true>(out_w);
    } else {
      RunRows<false>(out_w);
    }
  }
};

template <bool kClampHi, bool kFlip, int kS, int K, bool kMasked>
void RowsKxK(const DepthwiseRowArgs& d) {
  const ConvGeometry& g = *d.geo;
  const int64_t cc = d.channels;
  const int64_t nblocks = BlocksKxK(cc);
  std::vector<BlockKxK<K>> local;
  const BlockKxK<K>* blocks = PreparedBlocks(d.prepared, nblocks, &local,
                                             [&](BlockKxK<K>* b) { PrepareKxK<K>(d, b); });
  const Epilogue512Consts k = Zmm16::MakeConsts(d);
  const int64_t c_split = BlocksKxKEnd(cc);
  // The channels past the blocks: the one-tap-per-lane kernel.
  if (c_split < cc) Rows16::RestChannels(d, k, c_split);
  InteriorKxK<kClampHi, kFlip, kS, K, kMasked> in;
  in.d = &d;
  in.k = &k;
  in.mask = BlockMask(cc);
  // Blocks outer, rows inner (a block's weights, 12 KiB for 5x5 and 23 for
  // 7x7, stay in L1).
  for (int64_t bi = 0; bi < nblocks; ++bi) {
    in.blk = &blocks[bi];
    in.c0 = BlockKxKStart(bi, cc);
    for (int64_t r = d.row_begin; r < d.row_end; ++r) {
      in.SetRow(r);
      in.Run(g.out_w);
    }
  }
}

template <int K, bool kMasked>
void DispatchRowsKxK(const DepthwiseRowArgs& d) {
  WithClampHi(d.clamp_hi, [&](auto clamp) {
    constexpr bool kClampHi = decltype(clamp)::value;
    if (d.input_non_negative) {
      if (d.geo->stride_w == 1) {
        RowsKxK<kClampHi, false, 1, K, kMasked>(d);
      } else {
        RowsKxK<kClampHi, false, 2, K, kMasked>(d);
      }
    } else if (d.geo->stride_w == 1) {
      RowsKxK<kClampHi, true, 1, K, kMasked>(d);
    } else {
      RowsKxK<kClampHi, true, 2, K, kMasked>(d);
    }
  });
}

template <int K>
void DispatchRowsKxK(const DepthwiseRowArgs& d) {
  if (d.channels < kBlock) {
    DispatchRowsKxK<K, true>(d);
  } else {
    DispatchRowsKxK<K, false>(d);
  }
}

int64_t PrepBytes(const DepthwiseRowArgs& d) {
  switch (KxKInterior(d)) {
    case 5:
      return static_cast<int64_t>(sizeof(BlockKxK<5>)) * BlocksKxK(d.channels);
    case 7:
      return static_cast<int64_t>(sizeof(BlockKxK<7>)) * BlocksKxK(d.channels);
    default:
      break;
  }
  return Use3x3Interior(d)
             ? static_cast<int64_t>(sizeof(Block3x3)) * Blocks3x3(d.channels, *d.geo)
             : 0;
}

void PrepFill(const DepthwiseRowArgs& d, void* p) {
  switch (KxKInterior(d)) {
    case 5:
      PrepareKxK<5>(d, static_cast<BlockKxK<5>*>(p));
      return;
    case 7:
      PrepareKxK<7>(d, static_cast<BlockKxK<7>*>(p));
      return;
    default:
      PrepareBlocks(d, static_cast<Block3x3*>(p));
  }
}

// Rows3x3 and RowsKxK run the one-tap-per-lane kernel (widened weights)
// only on the channels past the last full 64-channel block (none past
// RowsKxK's overlapping or partial block).
int64_t PrepWideFrom(const DepthwiseRowArgs& d) {
  if (KxKInterior(d) != 0) return BlocksKxKEnd(d.channels);
  if (Use3x3Interior(d) && PartialBlock3x3(d.channels, *d.geo)) return d.channels;
  return Use3x3Interior(d) ? d.channels / kBlock * kBlock : 0;
}

}  // namespace

extern const DepthwisePrep kDepthwisePrepAvx512Vnni = {PrepBytes, PrepFill,
                                                       PrepWideFrom};

void DepthwiseRowsAvx512Vnni(const DepthwiseRowArgs& d) {
  const int kxk = KxKInterior(d);
  if (kxk == 5) {
    DispatchRowsKxK<5>(d);
  } else if (kxk == 7) {
    DispatchRowsKxK<7>(d);
  } else if (Use3x3Interior(d)) {
    WithClampHi(d.clamp_hi, [&](auto clamp) {
      if (d.input_non_negative) {
        Rows3x3<decltype(clamp)::value, false>(d);
      } else {
        Rows3x3<decltype(clamp)::value, true>(d);
      }
    });
  } else {
    Rows16::Rows(d);
  }
}

namespace {

// kHalves units of 32 channels (the last ones cut by their masks to the
// channels there are) from x and sum's first channel: one zmm of int16 a
// unit over runs of kChannelSumsRun pixels (VPMOVSXBW of 32 bytes, VPADDW),
// each run widened and added into sum.
template <int kHalves>
void ChannelSumsGroup(const int8_t* x, int64_t pixels, int64_t cc,
                      const __mmask32* masks, int32_t* sum) {
  for (int64_t p0 = 0; p0 < pixels; p0 += kChannelSumsRun) {
    const int64_t p1 = std::min(pixels, p0 + kChannelSumsRun);
    __m512i acc[kHalves];
    for (int h = 0; h < kHalves; ++h) acc[h] = _mm512_setzero_si512();
    for (int64_t p = p0; p < p1; ++p) {
      const int8_t* row = x + p * cc;
      for (int h = 0; h < kHalves; ++h) {
        const __m256i v = _mm256_maskz_loadu_epi8(masks[h], row + 32 * h);
        acc[h] = _mm512_add_epi16(acc[h], _mm512_cvtepi8_epi16(v));
      }
    }
    for (int h = 0; h < kHalves; ++h) {
      int32_t* s = sum + 32 * h;
      _mm512_storeu_si512(s, _mm512_add_epi32(_mm512_loadu_si512(s),
          _mm512_cvtepi16_epi32(_mm512_castsi512_si256(acc[h]))));
      _mm512_storeu_si512(s + 16, _mm512_add_epi32(_mm512_loadu_si512(s + 16),
          _mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(acc[h], 1))));
    }
  }
}

// The channel sums of one image (DepthwiseGlobalRowsAvx512) into sum
// (room for channels rounded up to 64): groups of up to 256 channels (8 zmm
// accumulators), pixels inner.
void ChannelSums(const int8_t* x, int64_t pixels, int64_t cc, int32_t* sum) {
  constexpr int kMaxHalves = 8;
  std::fill(sum, sum + (cc + 63) / 64 * 64, 0);
  for (int64_t c0 = 0; c0 < cc; c0 += 32 * kMaxHalves) {
    const int64_t n = std::min<int64_t>(cc - c0, 32 * kMaxHalves);
    __mmask32 masks[kMaxHalves];
    for (int h = 0; h < kMaxHalves; ++h) {
      const int64_t left = n - 32 * h;
      masks[h] = left >= 32 ? ~__mmask32{0}
                            : left > 0 ? (__mmask32{1} << left) - 1 : __mmask32{0};
    }
    const int8_t* xc = x + c0;
    int32_t* sc = sum + c0;
    WithStaticCount<kMaxHalves>((n + 31) / 32, [&](auto halves) {
      ChannelSumsGroup<decltype(halves)::value>(xc, pixels, cc, masks, sc);
    });
  }
}

}  // namespace

// The sums, then per 16 channels their product with the filter's byte
// (VPMULLD) and Epilogue16Natural.
void DepthwiseGlobalRowsAvx512(const DepthwiseRowArgs& d) {
  const ConvGeometry& g = *d.geo;
  const int64_t cc = d.channels, pixels = g.in_h * g.in_w;
  std::vector<int32_t> sum(static_cast<size_t>((cc + 63) / 64 * 64));
  const Epilogue512Consts k = MakeEpilogue512Consts(d.side_scale, d.lo, d.hi);
  WithClampHi(d.clamp_hi, [&](auto clamp) {
    constexpr bool kClampHi = decltype(clamp)::value;
    for (int64_t r = d.row_begin; r < d.row_end; ++r) {
      ChannelSums(d.input + r * pixels * cc, pixels, cc, sum.data());
      for (int64_t c = 0; c < cc; c += 16) {
        const int64_t n = std::min<int64_t>(16, cc - c);
        const __mmask16 mask = n == 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << n) - 1);
        const __m512i w = _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, d.filter + c));
        const __m512i acc = _mm512_mullo_epi32(_mm512_loadu_si512(sum.data() + c), w);
        Epilogue16Natural<kClampHi>(acc, d.scale + c, d.bias + c,
                                    d.side != nullptr ? d.side + r * cc + c : nullptr, k,
                                    mask, d.output + r * cc + c);
      }
    }
  });
}

// 64 bytes a step (VPMAXSB, VPMINSB), the last n % 64 under a byte mask.
void DepthwiseIdentityRowsAvx512(const DepthwiseRowArgs& d) {
  IdentityRows(d, [](const int8_t* src, int64_t n, int8_t lo, int8_t hi, int8_t* dst) {
    const __m512i vlo = _mm512_set1_epi8(lo), vhi = _mm512_set1_epi8(hi);
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
      const __m512i v = _mm512_loadu_si512(src + i);
      _mm512_storeu_si512(dst + i, _mm512_min_epi8(_mm512_max_epi8(v, vlo), vhi));
    }
    if (i < n) {
      const __mmask64 m = (__mmask64{1} << (n - i)) - 1;
      const __m512i v = _mm512_maskz_loadu_epi8(m, src + i);
      _mm512_mask_storeu_epi8(dst + i, m, _mm512_min_epi8(_mm512_max_epi8(v, vlo), vhi));
    }
  });
}

}  // namespace cpu
}  // namespace tf_fused_int8
