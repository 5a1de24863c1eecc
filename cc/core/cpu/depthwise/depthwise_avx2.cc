// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Depthwise row kernel, AVX2 (the avx2 path; the avxvnni path runs it on the
// channels past its VPDPBUSD blocks, depthwise_avxvnni.cc): 16 channels as two
// ymm of int32, one PMADDWD + PADDD per tap and 8 channels (sign-extended
// int8 activations times the widened weights of depthwise.h: w * x
// exactly), or, in the interior of 3-, 5- and 7-wide windows, per two
// filter rows (LoadPair: the two rows' activations as int16 pairs times
// pair weights, both taps in one PMADDWD: against one row at a time,
// bench_core, one Zen 5 thread, 11 rounds alternated, median time ratio
// 0.89-0.99 on MobileNetV2's layers); a last block of fewer than 16
// channels reads and stores its bytes with LoadBytes16 / Store16
// (epilogue_avx2.h: one to four plain moves for any count; through a
// zeroed copy for every count, bench_core, one Zen 4 thread, avx2 forced,
// MobileNetV3's layers: 56x56x72 179 -> 80 us, 28x28x120 5x5 163 -> 76,
// 56x56x72 5x5 / 2 144 -> 48, 14x14x200 19 -> 13; 56x56x64 unchanged;
// NASNet's 11 and 22 channels, through the copy until 2026-12-07, at batch
// 8: 56x56x11 7x7 7.6 -> 1.36 ms, 5x5 4.3-4.5 -> 0.61, 56x56x22 7x7 8.4-8.6
// -> 1.75). The row walk is
// depthwise_rows.h; the epilogue is Epilogue16 / Epilogue16x2
// (epilogue_avx2.h, natural order).
//
// On an input known to be in [0, 127] (DepthwiseRowArgs::input_non_negative:
// a Relu step's output in the sequence op, as MobileNetV2's depthwise
// layers read), 3x3 (and, below, 5x5) layers at stride 1 or 2 run
// depthwise_blocks_ymm.h's 32-channel blocks with VPMADDUBSW + VPMADDWD by
// ones + VPADDD as their dot (MaddubsDot below: exact there only), the
// channels past the blocks this kernel. Against this kernel on every
// channel (bench_core, one Zen 4 thread, avx2 forced, input told
// non-negative, 4 rotating filters, old and new alternated twice):
// 112x112x32 185-200 -> 92 us, 56x56x144 218-258 -> 124-129 (batch 8
// 2206-2314 -> 1387-1471), 112x112x96 / 2 220-230 -> 114-121, 56x56x144 / 2
// 91-100 -> 62-64, 28x28x192 90 -> 40-41, 14x14x576 71 -> 31-33, 7x7x960 36
// -> 15. MobileNetV2's 17 depthwise steps in TF
// (step profiler, runner, one thread, avx2 forced, libraries alternated
// four times): 1.43-1.76 -> 0.89-1.04 ms of its 5.3-6.6 ms.
//
// Any other input (signed: a SiLU or hard-swish table's output, a linear
// projection's) takes the same blocks since 2026-12-06: its bytes as they
// are with SignDot (VPABSB, VPSIGNB, then MaddubsDot's three; exact where no
// weight byte is -128, as every quantize_model filter: [-127, 127]), or,
// where a block holds a -128 weight, the flipped bytes with WidenedDot
// (dot_u8s8_avx2.h, exact on every byte). Against this kernel on every
// channel (bench_core, one Zen 4 thread, avx2 forced, a signed input,
// weights in [-127, 127], 4 rotating filters, 5 rounds alternated, median
// time ratio): 112x112x32 0.63, 56x56x144 0.69 (batch 8 0.76), 112x112x96 /
// 2 0.80, 56x56x144 / 2 0.79, 28x28x192 0.56, 14x14x384 0.55, 14x14x576 /
// 2 0.68, 7x7x960 0.53; with -128 weights (WidenedDot, every int8 weight)
// 0.59-0.99. EfficientNetB0's 3x3 depthwise steps in TF (step profiler,
// runner, one thread, avx2 forced, libraries alternated twice): 0.65-0.84x,
// all its depthwise steps 2.72-2.84 -> 2.43-2.56 ms.
//
// The 5x5 layers (stride 1 or 2) run depthwise_blocks_ymm.h's 5x5 blocks
// with the same three dots (groups of two pixels; same day, same method):
// a signed input 28x28x240 0.69-0.78, 14x14x480 0.71, 14x14x672 0.65-0.80,
// 7x7x1152 0.71, 56x56x144 / 2 0.79, 14x14x672 / 2 0.89; in [0, 127]
// 0.47-0.58.
// The 7x7 layers (2026-12-07: NASNet's, ConvNeXt's) run the same blocks
// (depthwise_blocks_ymm.h's KxK; they ran this kernel, two filter rows a
// PMADDWD at stride 1, one at stride 2): bench_core, one Zen 4 thread, avx2
// forced, old and new alternated twice, a signed input 14x14x88 49-50 ->
// 31 us, 28x28x88 / 2 at batch 8 650-664 -> 347-357, 56x56x96 623-630 ->
// 454-455, 14x14x176 at batch 8 726-749 -> 479-482, 7x7x352 55-56 -> 30-31;
// in [0, 127] 14x14x88 49-52 -> 13.7, 28x28x88 / 2 at batch 8 638-641 ->
// 145-146, 56x56x96 618-627 -> 220. The 5x5 blocks, now loading only the
// columns a group reads one dword at a time, measured 0.80-0.88x their
// earlier time on signed inputs (28x28x240, 14x14x672, 14x14x672 / 2,
// 28x28x44 at batch 8), 1.01x on 56x56x144 / 2, 0.96-1.0x in [0, 127].
// At batch 8 this VM read anything from 0.89 to 1.4 for the same pair of
// binaries within minutes (28x28x240: 1.2-1.5 in some runs, its eight
// images' 3 MB no longer in L2, 0.9 in others). EfficientNetB0 in TF (as
// above, libraries alternated twice): its depthwise steps 2.41-2.53 ->
// 2.09-2.10 ms at batch 1, 18.4-19.3 -> 17.1-17.7 ms at batch 8.
//
// Tried and dropped: running the two 8-channel halves of a block one after
// the other in the interior, so that 8 pixels' accumulators and the weights
// fit the 16 ymm registers (perf shows a seventh of the interior's samples
// on spills): no faster at stride 1 (0.98-1.03x the time), 1.13-1.21x at
// stride 2 and on 7x7x960 (bench_core, one Zen 5 thread, alternated).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cc/core/cpu/depthwise/depthwise.h"
#include "cc/core/cpu/depthwise/depthwise_blocks_ymm.h"
#include "cc/core/cpu/depthwise/depthwise_identity.h"
#include "cc/core/cpu/depthwise/depthwise_ymm.h"
#include "cc/core/cpu/dot_u8s8_avx2.h"
#include "cc/core/cpu/static_count.h"
#include "cc/core/epilogue.h"
#include "cc/core/epilogue_avx2.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

// Four u8 x s8 products a dword lane for bytes in [0, 127] only: VPMADDUBSW
// sums two into an int16 lane, at most 2 * 127 * 128 = 32512 in magnitude
// (never saturating, as gemm_avx2.cc's non-negative kernel relies on), and
// VPMADDWD by ones sums two of those into the int32 lane, exactly.
struct MaddubsDot {
  static constexpr bool kAnyU8 = false;
  static __m256i Dot(__m256i acc, __m256i u8, __m256i s8) {
    const __m256i pairs = _mm256_maddubs_epi16(u8, s8);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
};

// A signed input as it is (no flip): |x| (u8, up to 128) times w with x's
// sign (VPSIGNB: -w where x < 0, 0 where x == 0), VPMADDUBSW, VPMADDWD by
// ones, VPADDD: four products a lane in five instructions (VPABSB, VPSIGNB
// and the three of MaddubsDot), the abs shared by the two pixels a column
// vector feeds. Exact where no weight byte is -128: then |w| <= 127, -w
// does not wrap, and a VPMADDUBSW pair sum is at most 2 * 128 * 127 =
// 32512 in magnitude (no saturation); a -128 would become -128 again under
// VPSIGNB (its product's sign wrong), so blocks with one take WidenedDot.
struct SignDot {
  static constexpr bool kAnyU8 = false;
  static __m256i Dot(__m256i acc, __m256i x, __m256i s8) {
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(x), _mm256_sign_epi8(s8, x));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
};

// Any u8 byte (the flipped form of any input): DotU8S8Widened, exact.
struct WidenedDot {
  static constexpr bool kAnyU8 = true;
  static __m256i Dot(__m256i acc, __m256i u8, __m256i s8) {
    return DotU8S8Widened(acc, u8, s8);
  }
};

// The blocks on an input not told to be in [0, 127]: SignDot on its bytes
// as they are, or, where a weight byte of the blocks is -128, WidenedDot on
// the flipped bytes.
struct SignedBlocks {
  template <bool kClampHi>
  static void Rows(const DepthwiseRowArgs& d, const DepthwiseRowArgs& rest) {
    if (BlocksHaveMinWeight(d)) {
      RowsBlocks<WidenedDot, kClampHi, true>(d, rest);
    } else {
      RowsBlocks<SignDot, kClampHi, false>(d, rest);
    }
  }
};

}  // namespace

extern const DepthwisePrep kDepthwisePrepAvx2 = {PrepBytes, PrepFill<MaddubsDot>,
                                                 BlocksWideFrom};

bool DepthwiseAvx2TakesNonNegative(const ConvGeometry& g) {
  DepthwiseRowArgs d;
  d.geo = &g;
  d.channels = g.out_c;
  return UseBlocks(d);
}

void DepthwiseRowsAvx2(const DepthwiseRowArgs& d) {
  RowsWithBlocks<MaddubsDot, SignedBlocks>(d);
}

namespace {

// kUnits units of 16 channels from x and sum's first channel: one ymm of
// int16 a unit over runs of kChannelSumsRun pixels (VPMOVSXBW of 16 bytes,
// VPADDW), each run widened and added into sum.
template <int kUnits>
void ChannelSumsGroup(const int8_t* x, int64_t pixels, int64_t cc, int32_t* sum) {
  for (int64_t p0 = 0; p0 < pixels; p0 += kChannelSumsRun) {
    const int64_t p1 = std::min(pixels, p0 + kChannelSumsRun);
    __m256i acc[kUnits];
    for (int u = 0; u < kUnits; ++u) acc[u] = _mm256_setzero_si256();
    // Two pixels an iteration: one a time ran at the mercy of the loop's
    // alignment (the same loop 1.3x slower after unrelated code moved it,
    // 112x112x32 on one Zen 4 thread); unrolled, 5.5-5.7 us either way.
#pragma GCC unroll 2
    for (int64_t p = p0; p < p1; ++p) {
      const int8_t* row = x + p * cc;
      for (int u = 0; u < kUnits; ++u) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 16 * u));
        acc[u] = _mm256_add_epi16(acc[u], _mm256_cvtepi8_epi16(v));
      }
    }
    for (int u = 0; u < kUnits; ++u) {
      __m256i* s = reinterpret_cast<__m256i*>(sum + 16 * u);
      _mm256_storeu_si256(s, _mm256_add_epi32(_mm256_loadu_si256(s),
          _mm256_cvtepi16_epi32(_mm256_castsi256_si128(acc[u]))));
      _mm256_storeu_si256(s + 1, _mm256_add_epi32(_mm256_loadu_si256(s + 1),
          _mm256_cvtepi16_epi32(_mm256_extracti128_si256(acc[u], 1))));
    }
  }
}

// The channel sums of one image (DepthwiseGlobalRowsAvx2) into sum (room
// for channels rounded up to 64): groups of up to 128 channels (8 ymm
// accumulators), pixels inner; the channels past the last multiple of 16 one
// at a time in int32.
void ChannelSums(const int8_t* x, int64_t pixels, int64_t cc, int32_t* sum) {
  constexpr int kMaxUnits = 8;
  std::fill(sum, sum + (cc + 63) / 64 * 64, 0);
  const int64_t vector_c = cc / 16 * 16;
  for (int64_t c0 = 0; c0 < vector_c; c0 += 16 * kMaxUnits) {
    const int64_t units = std::min<int64_t>((vector_c - c0) / 16, kMaxUnits);
    const int8_t* xc = x + c0;
    int32_t* sc = sum + c0;
    WithStaticCount<kMaxUnits>(units, [&](auto n) {
      ChannelSumsGroup<decltype(n)::value>(xc, pixels, cc, sc);
    });
  }
  for (int64_t p = 0; p < pixels; ++p) {
    for (int64_t c = vector_c; c < cc; ++c) sum[c] += x[p * cc + c];
  }
}

}  // namespace

// The sums, then per 16 channels their product with the filter's bytes
// (VPMULLD; a last partial block's bytes by LoadBytes16) and Epilogue16.
void DepthwiseGlobalRowsAvx2(const DepthwiseRowArgs& d) {
  const ConvGeometry& g = *d.geo;
  const int64_t cc = d.channels, pixels = g.in_h * g.in_w;
  std::vector<int32_t> sum(static_cast<size_t>((cc + 63) / 64 * 64));
  const Epilogue256Consts k = MakeEpilogue256Consts(d.side_scale, d.lo, d.hi);
  WithClampHi(d.clamp_hi, [&](auto clamp) {
    constexpr bool kClampHi = decltype(clamp)::value;
    for (int64_t r = d.row_begin; r < d.row_end; ++r) {
      ChannelSums(d.input + r * pixels * cc, pixels, cc, sum.data());
      for (int64_t c = 0; c < cc; c += 16) {
        const int count = static_cast<int>(std::min<int64_t>(16, cc - c));
        const __m128i wb = LoadBytes16(d.filter + c, count);
        const __m256i* s = reinterpret_cast<const __m256i*>(sum.data() + c);
        const __m256i a0 = _mm256_mullo_epi32(_mm256_loadu_si256(s), _mm256_cvtepi8_epi32(wb));
        const __m256i a1 = _mm256_mullo_epi32(_mm256_loadu_si256(s + 1),
                                              _mm256_cvtepi8_epi32(_mm_srli_si128(wb, 8)));
        Epilogue16<kClampHi>(a0, a1, d.scale + c, d.bias + c,
                             d.side != nullptr ? d.side + r * cc + c : nullptr, k, count,
                             d.output + r * cc + c);
      }
    }
  });
}

// 32 bytes a step (VPMAXSB, VPMINSB), the last n % 32 one at a time.
void DepthwiseIdentityRowsAvx2(const DepthwiseRowArgs& d) {
  IdentityRows(d, [](const int8_t* src, int64_t n, int8_t lo, int8_t hi, int8_t* dst) {
    const __m256i vlo = _mm256_set1_epi8(lo), vhi = _mm256_set1_epi8(hi);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                          _mm256_min_epi8(_mm256_max_epi8(v, vlo), vhi));
    }
    ClipBytes(src, i, n, lo, hi, dst);
  });
}

}  // namespace cpu
}  // namespace tf_fused_int8
