// Copyright tf-fused-int8 authors. Apache 2.0.
//
// AVX2 kernels (no VNNI): the ymm micro-kernel of gemm_ymm.h, two operand
// forms.
//
//  * kAvx2Kernels, any int8 input: activations and weights sign-extended to
//    int16, VPMADDWD sums two int16 products into each int32 lane exactly
//    (|2 * 128 * 128| < 2^31), VPADDD accumulates.
//  * kAvx2NonNegativeKernels, an input whose every byte is in [0, 127] (a
//    Relu layer's output: FusedConvArgs::input_non_negative, or checked by
//    InputNonNegativeAvx2): VPMADDUBSW reads those bytes as u8 against the
//    int8 weights and sums two products into an int16 lane, at most 2 * 127
//    * 128 = 32512 <= 32767 in magnitude (127 * -128 * 2 = -32512 >=
//    -32768), so it never saturates and is exact; VPMADDWD by ones then
//    sums two such int16 into an int32 lane (four products, exact) and
//    VPADDD accumulates. Four products per lane in three instructions where
//    the int16 form takes four for the same work; the weights are the
//    4-byte groups of kFormatYmmU8 (avxvnni's packing, shared with it in
//    the cache). The same VPMADDUBSW on any other input (a byte >= 128 as
//    u8) can saturate and is never used for one.
//    Measured (bench_core, one thread, pinned weights, avx2 forced on a
//    Xeon with AMX under KVM, 2026-12-05), int16 -> this kernel on a
//    non-negative input, its check included: ResNet-50's 1x1 layers
//    56x56x64 -> 256 796-822 -> 634-640 us (batch 8 6.6 -> 5.3 ms),
//    56x56x256 -> 64 738 -> 556, 28x28x512 -> 128 713 -> 528, 14x14x1024
//    -> 256 710 -> 515, 7x7x2048 -> 512 734 -> 519: 1.26-1.42x (it also
//    broadcasts once per four k instead of two). The check itself cost
//    0-2% (against the same input marked known). In TF (step profiler,
//    InferenceRunner, builds alternated three times, avx2 forced): ResNet50
//    batch 1, one thread, the steps' sum 46.0-48.2 -> 39.4-41.1 ms;
//    MobileNetV2 6.23-6.31 -> 5.79-5.82 ms (its expansions read signed
//    inputs and keep the int16 kernels). The 6 x 16 micro-tile keeps one of
//    its 12 accumulators on the stack (the ones vector of VPMADDWD takes
//    the 16th register); a 5-row one with none there ran the same
//    (bench_core, avx2_direct, 1x1 and 3x3 layers, within 2%).
//
// Built with -mavx2 -mfma -ffp-contract=off; everything but the IsaKernels
// tables and InputNonNegativeAvx2 has internal linkage.
#include <immintrin.h>

#include <cstring>

#include "cc/core/cpu/gemm/gemm_kernels.h"
#include "cc/core/cpu/gemm/gemm_ymm.h"
#include "cc/core/cpu/static_count.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

struct MaddPolicy {
  static constexpr bool kInt16 = true;
  static constexpr bool kShift = false;
  static __m256i Dot(__m256i acc, __m256i a, __m256i b) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
  }
};

// Inputs in [0, 127] only (see the top of this file).
struct NonNegativePolicy {
  static constexpr bool kInt16 = false;
  static constexpr bool kShift = false;
  static __m256i Dot(__m256i acc, __m256i a, __m256i b) {
    const __m256i pairs = _mm256_maddubs_epi16(a, b);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
};

// ------------------------------------------- GEMV over the byte packing
//
// Few output pixels against a pinned filter (IsaKernels::gemv_packed): the
// filter's kFormatYmmU8 packing, the bytes kAvx2NonNegativeKernels' GEMM
// reads (16-channel blocks, each k-group of 4 a dword per channel, a
// block's groups contiguous), read sequentially, one stream per block.
// Inputs in [0, 127] (kSigned false) go to VPMADDUBSW as they are, as in
// that GEMM (any weight). For any int8 x and w != -128 (kSigned):
//   x * w = |x| * (sign(x) * w),
// with |x| <= 128 read as u8 and sign(x) * w (VPSIGNB: w negated where x <
// 0, zero where x == 0) in [-127, 127], so VPMADDUBSW's sums of two such
// products are at most 2 * 128 * 127 = 32512 <= 32767 in magnitude: it never
// saturates and is exact. VPMADDWD by ones adds two of those into an int32
// lane (four products), VPADDD accumulates. A packing with a -128 weight
// (negated it would wrap to itself) never gets here: the driver sends it to
// the GEMV that reads the filter (PackedView::any_int8_min). Per 32 products:
// one load, VPSIGNB, VPMADDUBSW, VPMADDWD, VPADDD, where GemvYmm
// (gemm_ymm.h) spends two sign-extending loads, four VPMADDWD and four VPADDD
// and reads 64 bytes of each filter row (strided). For inputs in [0, 127]
// it replaces the packed GEMM (gemm_ymm.h, YmmKernels: gemv_unpinned_only),
// whose 6-row micro-tiles do one row's work here. bench_core, one Zen 4
// thread, avx2 forced, 16 pinned filters cycled, input told non-negative,
// 4 rounds alternated, GEMM -> this: 1x1x1280 -> 1000 51 -> 32 us (batch 2
// 58 -> 50), 960 -> 1280 46 -> 37, 2048 -> 1000 181 -> 100; two threads
// 0.53-0.83x the time.
constexpr int64_t kGemvBytesBlocksOneRow = 4;  // 8 accumulators
constexpr int64_t kGemvBytesBlocksTwoRows = 2;
// Each block's stream is prefetched this many groups (64 bytes each) ahead
// (a prefetch past the packing's end reads nothing). bench_core, one Zen 4
// thread, 16 pinned filters cycled, alternated 6 times: 1x1x1280 -> 1000
// 0.91x the time without it, batch 2 0.96x, 1x1x2048 -> 1000 0.98x (32
// groups ahead: 0.81-1.07x, no better).
constexpr int64_t kGemvBytesPrefetchGroups = 8;

// One pixel's 4 activation bytes of group gi, zeros past K (the packing's
// groups past K are zero, but the row's bytes there may not be readable).
inline int32_t GroupBytes(const int8_t* row, int64_t gi, int64_t k) {
  int32_t x = 0;
  std::memcpy(&x, row + 4 * gi, static_cast<size_t>(Min(4, k - 4 * gi)));
  return x;
}

// R rows x NB blocks of 16 channels from block b0 (all NB real).
template <bool kSigned, int R, int NB>
void GemvBytesPass(const GemvArgs& t, int64_t b0, const Epilogue256Consts& ec) {
  const PackedView& v = *t.packed;
  const int64_t block_bytes = v.k_groups * kYmmGroupBytes;
  const int8_t* wb = v.data + b0 * block_bytes;
  const int64_t groups = (t.k + 3) / 4;  // <= v.k_groups
  __m256i acc[R][NB][2];
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int j = 0; j < NB; ++j) acc[r][j][0] = acc[r][j][1] = _mm256_setzero_si256();
  }
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t gi = 0; gi < groups; ++gi) {
    __m256i xs[R], xa[R];
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
      const int8_t* row = t.a + r * t.lda;
      int32_t x;
      if (4 * gi + 4 <= t.k) {
        std::memcpy(&x, row + 4 * gi, 4);
      } else {
        x = GroupBytes(row, gi, t.k);
      }
      xs[r] = _mm256_set1_epi32(x);
      xa[r] = kSigned ? _mm256_abs_epi8(xs[r]) : xs[r];
    }
#pragma GCC unroll 4
    for (int j = 0; j < NB; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(
                       wb + j * block_bytes + (gi + kGemvBytesPrefetchGroups) * kYmmGroupBytes),
                   _MM_HINT_T0);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(
            wb + j * block_bytes + gi * kYmmGroupBytes + 32 * h));
#pragma GCC unroll 2
        for (int r = 0; r < R; ++r) {
          const __m256i pairs =
              _mm256_maddubs_epi16(xa[r], kSigned ? _mm256_sign_epi8(w, xs[r]) : w);
          acc[r][j][h] = _mm256_add_epi32(acc[r][j][h], _mm256_madd_epi16(pairs, ones));
        }
      }
    }
  }
  const EpilogueArgs& ep = *t.ep;
  const int64_t co = t.out_c;
#pragma GCC unroll 4
  for (int j = 0; j < NB; ++j) {
    const int64_t n0 = (b0 + j) * kYmmBlock;
    const int count = static_cast<int>(Min(kYmmBlock, co - n0));
    Block16Consts bc;
    FillBlock16Consts(ep, n0, co, &bc);
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
      Epilogue16(acc[r][j][0], acc[r][j][1], bc.scale, bc.bias,
                 ep.side ? ep.side + r * co + n0 : nullptr, ec, count,
                 t.output + r * co + n0);
    }
  }
}

template <bool kSigned>
void GemvBytes(const GemvArgs& t) {
  const EpilogueArgs& ep = *t.ep;
  const Epilogue256Consts ec = MakeEpilogue256Consts(ep.side_scale, ep.lo, ep.hi);
  static_assert(kGemvBlock % kYmmBlock == 0, "GEMV units are whole ymm blocks");
  const int64_t b_begin = t.block_begin * (kGemvBlock / kYmmBlock);
  const int64_t b_end =
      (Min(t.out_c, t.block_end * kGemvBlock) + kYmmBlock - 1) / kYmmBlock;
  static_assert(kGemvMaxRows == 2, "GemvBytes instantiates 1 and 2 rows");
  const int64_t step = t.rows == 1 ? kGemvBytesBlocksOneRow : kGemvBytesBlocksTwoRows;
  for (int64_t b = b_begin; b < b_end; b += step) {
    if (t.rows == 1) {
      WithStaticCount<kGemvBytesBlocksOneRow>(b_end - b, [&](auto nb) {
        GemvBytesPass<kSigned, 1, decltype(nb)::value>(t, b, ec);
      });
    } else {
      WithStaticCount<kGemvBytesBlocksTwoRows>(b_end - b, [&](auto nb) {
        GemvBytesPass<kSigned, 2, decltype(nb)::value>(t, b, ec);
      });
    }
  }
}

}  // namespace

bool InputNonNegativeAvx2(const int8_t* x, int64_t n) {
  // 256 bytes a step, OR-ed, so the sign bits are tested once per step; a
  // signed input usually stops at its first step.
  int64_t i = 0;
  for (; i + 256 <= n; i += 256) {
    __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
#pragma GCC unroll 7
    for (int j = 1; j < 8; ++j) {
      v = _mm256_or_si256(
          v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 32 * j)));
    }
    if (_mm256_movemask_epi8(v) != 0) return false;
  }
  int8_t any = 0;
  for (; i < n; ++i) any |= x[i];
  return any >= 0;
}

namespace {
// The ymm tables with the GEMV over the byte packing (both read
// kAvx2NonNegativeKernels' packing).
constexpr IsaKernels Avx2Kernels() {
  IsaKernels k = YmmKernels<MaddPolicy>("avx2");
  k.gemv_packed = GemvBytes<true>;
  k.gemv_packing = &kAvx2NonNegativeKernels;
  k.gemv_packed_no_int8_min = true;
  return k;
}
constexpr IsaKernels Avx2NonNegativeKernels() {
  IsaKernels k = YmmKernels<NonNegativePolicy>("avx2");
  k.gemv_packed = GemvBytes<false>;
  k.gemv_packing = &kAvx2NonNegativeKernels;
  return k;
}
}  // namespace

extern const IsaKernels kAvx2Kernels = Avx2Kernels();

extern const IsaKernels kAvx2NonNegativeKernels = Avx2NonNegativeKernels();

}  // namespace cpu
}  // namespace tf_fused_int8
