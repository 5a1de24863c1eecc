// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Code shared by the instruction-set GEMM kernels (gemm_avx512vnni.cc and,
// through gemm_ymm.h, gemm_avxvnni.cc / gemm_avx2.cc; on aarch64, through
// gemm_neon_tile.h, gemm_neon.cc / gemm_dotprod.cc / gemm_i8mm.cc): the
// K-sliced im2col gather, templated on a copy policy that supplies the
// vector primitives, plus small helpers (bounds, prefetch, the cached-panel
// verification).
//
// Include ONLY from *_avx512vnni.cc, *_amx.cc, *_avxvnni.cc, *_avx2.cc,
// gemm_ymm.h or gemm_neon_tile.h.
// Everything here is in an anonymous namespace (internal linkage), so each
// ISA translation unit gets its own copy compiled with its own flags and the
// linker can never merge it with another unit's (gemm_kernels.h says why that
// matters). For the same reason this header uses nothing inline from the
// baseline headers (e.g. IsPointwise of im2col.h).
#ifndef TF_FUSED_INT8_CC_CORE_CPU_GEMM_GEMM_ISA_COMMON_H_
#define TF_FUSED_INT8_CC_CORE_CPU_GEMM_GEMM_ISA_COMMON_H_

#if defined(__AVX2__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#else
#error "gemm_isa_common.h belongs to the ISA translation units only (gemm_kernels.h)"
#endif

#include <cstdint>
#include <cstring>

#include "cc/core/cpu/gemm/gemm_kernels.h"
#include "cc/core/epilogue.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

inline int64_t Min(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t Max(int64_t a, int64_t b) { return a > b ? a : b; }

// gemm_kernels.h, kFormatZmmU8, a full 64-channel block: lane position
// p = 16j + 4L + i holds channel 16L + 4j + i of the block (the same as
// BlockLaneChannel, inline for the per-lane loops of the ISA units).
constexpr int64_t ZmmU8LaneChannel(int64_t p) {
  return 16 * ((p / 4) % 4) + 4 * (p / 16) + p % 4;
}

inline int32_t LoadU32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Prefetches `lines` 64-byte lines from p into L2.
// The prefetch helpers are always_inline: GCC counts a function that only
// prefetches as free of side effects, and at -O2 deleted the calls of one
// it had not inlined early (a helper around PrefetchSideRows lost every
// side-input prefetch of gemm_avx512vnni.cc, silently: ResNet50's residual
// 1x1 layers at batch 8 ran 3.5x slower again until objdump showed it).
__attribute__((always_inline)) inline void PrefetchL2(const int8_t* p, int64_t lines) {
  for (int64_t l = 0; l < lines; ++l) {
#if defined(__AVX2__)
    _mm_prefetch(reinterpret_cast<const char*>(p + 64 * l), _MM_HINT_T1);
#else
    __builtin_prefetch(p + 64 * l, 0, 2);  // PRFM PLDL2KEEP
#endif
  }
}

// Prefetches into L1 the side input of rows [r0, r1) of a panel whose first
// row is pixel p0, channels [n0, n0 + width) (each row's first and last
// line). Read once, by the epilogue, at Co bytes apart: the hardware
// prefetchers do not follow it far enough when it comes from DRAM or L3.
__attribute__((always_inline)) inline void PrefetchSideRows(const int8_t* side, int64_t p0, int64_t r0, int64_t r1,
                             int64_t co, int64_t n0, int64_t width) {
  for (int64_t r = r0; r < r1; ++r) {
    const int8_t* p = side + (p0 + r) * co + n0;
#if defined(__AVX2__)
    _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p + width - 1), _MM_HINT_T0);
#else
    __builtin_prefetch(p, 0, 3);
    __builtin_prefetch(p + width - 1, 0, 3);
#endif
  }
}

// A (panel, block)'s share of the next one's lines for each of its `tiles`
// micro-tiles, taken in order: lines / tiles each, the remainder one each
// to the first tiles, with no division per tile (a pointwise tile with a
// short K is ~100 cycles of work).
class TileLineShare {
 public:
  TileLineShare(int64_t lines, int64_t tiles) : per_(lines / tiles), extra_(lines % tiles) {}
  // Micro-tile mt's lines: their count, the first one's index in *first.
  int64_t Take(int64_t mt, int64_t* first) {
    const int64_t n = per_ + (mt < extra_ ? 1 : 0);
    *first = done_;
    done_ += n;
    return n;
  }

 private:
  const int64_t per_, extra_;
  int64_t done_ = 0;
};

// Whether the item of t holds all the output channels (blocks of `block`
// channels): whole output rows are its own (PrefetchOutputRows).
inline bool HoldsWholeRows(const GemmTileArgs& t, int64_t block) {
  return t.block_begin == 0 && (t.block_end - t.block_begin) * block >= t.out_c;
}

// Prefetches output rows [r0, r1) of a panel (clamped to its rows) before
// they are written: whole rows of all Co channels, contiguous bytes in NHWC
// (a write hint, which without -mprfchw GCC emits as PREFETCHT0). Only for
// items that hold all the channels: with a channel split another thread
// writes the rest of those lines. A pointwise layer's output that leaves L2
// had its stores wait for the lines to be read in. One Zen 5 thread,
// bench_core, alternated, 16 rows ahead: avx512vnni 8x112x112x16 -> 96
// (9.6 MB) 1066-1168 -> 759-798 us (batch 1, 1.2 MB: 91-94 -> 92-96 us);
// 56x56x24 -> 144, 112x112x32 -> 16 and 56x56x96 -> 24 at batch 8, whose
// outputs had cost nothing over 8x batch 1, unchanged.
__attribute__((always_inline)) inline void PrefetchOutputRows(const GemmTileArgs& t, int64_t r0,
                                                              int64_t r1) {
  r1 = Min(r1, t.rows);
  if (r0 >= r1) return;
  const int64_t co = t.out_c;
  const uintptr_t lo =
      reinterpret_cast<uintptr_t>(t.output + (t.p0 + r0) * co) & ~uintptr_t{63};
  const uintptr_t hi = reinterpret_cast<uintptr_t>(t.output + (t.p0 + r1) * co);
  for (uintptr_t p = lo; p < hi; p += 64) {
    __builtin_prefetch(reinterpret_cast<const void*>(p), 1, 3);
  }
}

// Verifies filter rows [v0, v1) (whole groups of k_per_group rows except at
// the panel's end) against the cached packed panels of all of t's blocks
// with kPanel (verify mode); true if any differ.
template <PanelFn kPanel>
bool VerifyPanelRows(const GemmTileArgs& t, int64_t v0, int64_t v1,
                     int64_t k_per_group, int64_t group_bytes) {
  PanelArgs pa;
  pa.filter = t.filter;
  pa.k = t.k;
  pa.out_c = t.out_c;
  pa.verify = true;
  pa.g0 = v0 / k_per_group;
  pa.g1 = (v1 + k_per_group - 1) / k_per_group;
  bool stale = false;
  for (int64_t vb = t.block_begin; vb < t.block_end; ++vb) {
    pa.block_index = vb;
    pa.panel = const_cast<int8_t*>(
        t.w->data + (vb * t.k_groups + pa.g0) * group_bytes);
    stale |= kPanel(pa);
  }
  return stale;
}

#if defined(__AVX512BW__)
// The first n bits set (n >= 64: all).
inline __mmask64 ByteMask(int64_t n) {
  return n >= 64 ? ~__mmask64{0} : ((__mmask64{1} << n) - 1);
}
#endif

// The epilogue's scales and biases of 16 channels from n0 in natural order
// (the 16-channel blocks of the avx2 / avxvnni and amx kernels), zero past
// Co; 64-byte aligned, so one zmm or two ymm loads each.
struct alignas(64) Block16Consts {
  float scale[16];
  float bias[16];
};

inline void FillBlock16Consts(const EpilogueArgs& ep, int64_t n0, int64_t co,
                              Block16Consts* bc) {
  for (int64_t p = 0; p < 16; ++p) {
    const int64_t c = n0 + p;
    const bool in = c < co;
    bc->scale[p] = in ? ep.scale[ep.per_channel_scale ? c : 0] : 0.0f;
    bc->bias[p] = in ? ep.bias[c] : 0.0f;
  }
}

// UpperClampNeeded (epilogue.h) for one channel block of a GEMM call: k the
// packed depth (|acc| <= k * 2^14; zero groups past the filter's K add
// nothing), max_abs_scale and max_abs_bias the block's largest |scale| and
// |bias| (lanes past Co hold zeros, which do not change them).
inline bool BlockUpperClampNeeded(const EpilogueArgs& ep, int64_t k, float max_abs_scale,
                                  float max_abs_bias) {
  return UpperClampNeeded(ep.hi, MaxAbsAcc(k), max_abs_scale, max_abs_bias,
                          ep.side != nullptr, ep.side_scale);
}

// Whether the im2col rows are the input pixels themselves (1x1, stride 1,
// no padding): a direct GEMM, A row m = input pixel m (Ci bytes). The same
// test as im2col.h's IsPointwise, kept here for the reason at the top.
inline bool IsDirectGemm(const ConvGeometry& g) {
  return g.filter_h == 1 && g.filter_w == 1 && g.stride_h == 1 &&
         g.stride_w == 1 && g.pad_top == 0 && g.pad_left == 0 &&
         g.out_h == g.in_h && g.out_w == g.in_w;
}

// ----------------------------------------------------------------- im2col
//
// Im2ColSlice<Copy> gathers one K panel's slice [k0, k1) of the tile's
// im2col rows (the HWC window of each output pixel) converted to the A
// operand form. The copy policy `Copy` supplies the element form:
//   kElemBytes            bytes per A element (1: u8, 2: int16)
//   kStep                 elements per vector (= input bytes a Load reads)
//   Vec Load(src)         kStep input bytes
//   Vec LoadPartial(src, n)  n < kStep input bytes, the rest zero (reads
//                         only those n)
//   Store(dst, v)         converts v to kStep A elements at dst (x ^ 0x80
//                         for u8, as is for int8, sign extension for int16)
//   StorePad(dst)         kStep elements of padding, i.e. a zero activation
//                         (0x80 for u8, 0 for int8, int16 0)
// Pieces are written front to back in whole vectors that may run past the
// piece: the overrun lands on elements written later (the rest of the row,
// the next row) or in the buffer's slack (kIm2ColSlack). Elements past K
// meet zero weight rows, so their values do not matter.

// Converts n >= 0 input bytes to dst. Reads stay below src_end; writes may
// run up to one vector past the n elements.
template <class Copy>
inline void ConvertRun(uint8_t* dst, const int8_t* src, int64_t n,
                       const int8_t* src_end) {
  for (int64_t i = 0; i < n; i += Copy::kStep) {
    const int8_t* s = src + i;
    Copy::Store(dst + i * Copy::kElemBytes,
                s + Copy::kStep <= src_end
                    ? Copy::Load(s)
                    : Copy::LoadPartial(s, src_end - s));
  }
}

// Whether the policy has Copy16(dst, src): 16 input bytes converted with
// one 16-byte load and store (for the short runs of small-depth windows).
template <class Copy, class = void>
struct HasCopy16 {
  static constexpr bool value = false;
};
template <class Copy>
struct HasCopy16<Copy, decltype(void(Copy::Copy16(nullptr, nullptr)))> {
  static constexpr bool value = true;
};

// Whether the policy has Copy32(dst, src): 32 input bytes with one load and
// one store (a run of 17-32 bytes in CopyWindows, instead of two Copy16).
template <class Copy, class = void>
struct HasCopy32 {
  static constexpr bool value = false;
};
template <class Copy>
struct HasCopy32<Copy, decltype(void(Copy::Copy32(nullptr, nullptr)))> {
  static constexpr bool value = true;
};

// As ConvertRun, for a run whose last vector's read is known to stay inside
// the input (no bounds check). Runs of at most 16 bytes (a window row of a
// stem: 3x3x3 is 9 bytes, 7x7x3 21) go through Copy16 where the policy has
// it: a full-width vector store per 9-byte run, overlapping the next run's,
// was measured to cost more than the multiply-adds (MobileNetV2's stem,
// Zen 4: 45% of the call in that store).
template <class Copy>
inline void ConvertInterior(uint8_t* dst, const int8_t* src, int64_t n) {
  if constexpr (HasCopy16<Copy>::value) {
    if (n <= 16 && Copy::kStep >= 16) {
      Copy::Copy16(dst, src);
      return;
    }
  }
  for (int64_t i = 0; i < n; i += Copy::kStep) {
    Copy::Store(dst + i * Copy::kElemBytes, Copy::Load(src + i));
  }
}

// `count` interior windows of kFh rows of kRun bytes each (a stem: 3x3x3
// is 3 runs of 9 bytes, 7x7x3 7 of 21), window i's row ky at src + i *
// src_step + ky * ky_step, written to row + i * lda, ky's run at ky * kRun:
// every run through Copy16 (runs of 17-32 bytes through one Copy32 where the
// policy has it, else two Copy16), the loops and the run length known at
// compile time. Like the two Copy16, Copy32 reads and writes 32 bytes from
// the run's start: the next run's bytes are written again after it, the
// last run's extra bytes lie past K (zero weights). The generic loop
// (ConvertInterior per run) spent about 13 cycles a 3x3x3 window on its
// bookkeeping, 42% of
// MobileNetV2's stem on AVX-512 (perf, one Zen 5 thread). With this
// (bench_core, avx512vnni, one Zen 5 thread, 9 rounds alternated, median
// time ratio): MobileNetV2's 224x224x3 3x3 s2 -> 32 0.79 at batch 1 and
// 0.78 at batch 8, ResNet50's 7x7 s2 -> 64 0.94. Copy32 for the 7x7x3 runs
// of 21 bytes (the AVX-512 policies; bench_core, one AMX Xeon thread,
// alternated): amx 0.92-0.98x at batch 1 (three rounds), 0.92x at batch 8,
// avx512vnni 0.93-0.97x.
template <class Copy, int kFh, int kRun>
inline void CopyWindows(uint8_t* row, const int8_t* src, int64_t count,
                        int64_t src_step, int64_t lda, int64_t ky_step) {
  static_assert(kRun <= 32, "two Copy16 a run at most");
  for (int64_t i = 0; i < count; ++i, src += src_step, row += lda) {
#pragma GCC unroll 8
    for (int ky = 0; ky < kFh; ++ky) {
      uint8_t* out = row + ky * kRun * Copy::kElemBytes;
      const int8_t* in = src + ky * ky_step;
      if constexpr (kRun > 16 && HasCopy32<Copy>::value) {
        Copy::Copy32(out, in);
      } else {
        Copy::Copy16(out, in);
        if constexpr (kRun > 16) Copy::Copy16(out + 16 * Copy::kElemBytes, in + 16);
      }
    }
  }
}

// CopyWindows for the window shapes it is instantiated for (3x3x3 and 7x7x3
// stems) where the policy has Copy16; false (nothing copied) otherwise.
template <class Copy>
inline bool CopyStemWindows(int64_t filter_h, int64_t run, uint8_t* row, const int8_t* src,
                            int64_t count, int64_t src_step, int64_t lda, int64_t ky_step) {
  if constexpr (HasCopy16<Copy>::value) {
    if (Copy::kStep >= 16) {
      if (filter_h == 3 && run == 9) {
        CopyWindows<Copy, 3, 9>(row, src, count, src_step, lda, ky_step);
        return true;
      }
      if (filter_h == 7 && run == 21) {
        CopyWindows<Copy, 7, 21>(row, src, count, src_step, lda, ky_step);
        return true;
      }
    }
  }
  return false;
}

// n elements of padding; may write up to one vector past them.
template <class Copy>
inline void PadRun(uint8_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += Copy::kStep) {
    Copy::StorePad(dst + i * Copy::kElemBytes);
  }
}

// Writes the part of window segment [seg0, seg1) (element offsets within
// the ky run) that falls in [s, e) to out + (offset - s) elements; src (or
// padding when null) holds the segment's elements.
template <class Copy>
inline void CopySegment(uint8_t* out, int64_t s, int64_t e, int64_t seg0,
                        int64_t seg1, const int8_t* src, const int8_t* end) {
  const int64_t a = Max(s, seg0), b = Min(e, seg1);
  if (a >= b) return;
  uint8_t* dst = out + (a - s) * Copy::kElemBytes;
  if (src == nullptr) {
    PadRun<Copy>(dst, b - a);
  } else {
    ConvertRun<Copy>(dst, src + (a - seg0), b - a, end);
  }
}

#if defined(__AVX512BW__)
// Im2ColSlice's copy policy of the AVX-512 units (avx512vnni, amx): the A
// rows keep the int8 activations as they are (a plain copy), padding 0 (a
// zero activation), 64 bytes a vector.
struct ZmmS8Copy {
  using Vec = __m512i;
  static constexpr int64_t kElemBytes = 1;
  static constexpr int64_t kStep = 64;
  static Vec Load(const int8_t* src) { return _mm512_loadu_si512(src); }
  static Vec LoadPartial(const int8_t* src, int64_t n) {
    return _mm512_maskz_loadu_epi8(ByteMask(n), src);
  }
  static void Store(uint8_t* dst, Vec v) { _mm512_storeu_si512(dst, v); }
  static void StorePad(uint8_t* dst) {
    _mm512_storeu_si512(dst, _mm512_setzero_si512());
  }
  static void Copy16(uint8_t* dst, const int8_t* src) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  }
  static void Copy32(uint8_t* dst, const int8_t* src) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
  }
};
#endif

// A rows gathered per Im2ColSlice call: several micro-tiles' worth (in
// L1), so that the call's set-up (the first pixel's position: three
// divisions) is not paid per micro-tile. MobileNetV2's stem (224x224x3 3x3
// s2 -> 32, one Zen 5 thread, bench_core, alternated): per micro-tile
// ~125 us per call at batch 1, 8 KiB ~90 us (batch 8: 1170 -> 780 us);
// 2 KiB and 16 KiB were slower than 8 KiB, ResNet-50's 3x3 layers the same.
constexpr int64_t kGatherBytes = 8192;

// The rows to gather at micro-tile mt of `tiles` (heights base + 1 for the
// first `extra`, base for the rest): whole micro-tiles from mt on, at least
// mt's own, and no more than max_rows where more than one.
inline int64_t GatherRows(int64_t mt, int64_t tiles, int64_t base,
                          int64_t extra, int64_t max_rows) {
  int64_t n = base + (mt < extra ? 1 : 0);
  for (int64_t j = mt + 1; j < tiles; ++j) {
    const int64_t h = base + (j < extra ? 1 : 0);
    if (n + h > max_rows) break;
    n += h;
  }
  return n;
}

// Rows [r0, r0 + rows) of the tile (pixels t.p0 + r0 ...), elements
// [k0, k1) of their im2col rows, written to dst (t.lda bytes apart).
template <class Copy>
__attribute__((noinline)) void Im2ColSlice(const GemmTileArgs& t,
                                           uint8_t* dst, int64_t r0,
                                           int64_t rows, int64_t k0,
                                           int64_t k1) {
  constexpr int64_t el = Copy::kElemBytes;
  const ConvGeometry& g = *t.geo;
  const int64_t ci = g.in_c, kw = g.filter_w;
  const int64_t k = g.filter_h * kw * ci;
  k1 = Min(k1, k);
  if (k1 <= k0) return;
  const int8_t* end = t.input + g.batch * g.in_h * g.in_w * ci;
  const int64_t p0 = t.p0 + r0;
  if (IsDirectGemm(g)) {  // direct GEMM: the rows are the input pixels
    const int8_t* src = t.input + p0 * ci + k0;
    if (k0 == 0 && k1 == ci && t.lda == ci * el) {
      ConvertRun<Copy>(dst, src, rows * ci, end);
    } else {
      for (int64_t m = 0; m < rows; ++m) {
        ConvertRun<Copy>(dst + m * t.lda, src + m * ci, k1 - k0, end);
      }
    }
    return;
  }
  const int64_t run = kw * ci;
  const int64_t row_bytes = g.in_w * ci;
  const int64_t span_h = (g.filter_h - 1) * g.dilation_h;
  const int64_t ky_step = g.dilation_h * row_bytes;
  const int64_t ky0 = k0 / run, ky1 = (k1 - 1) / run;  // rows of the window
  const bool whole = k0 == 0 && k1 == k;  // the panel holds all of K
  int64_t ox = p0 % g.out_w;
  int64_t oy = (p0 / g.out_w) % g.out_h;
  int64_t n = p0 / (g.out_w * g.out_h);
  // Interior runs (the whole panel, dilation 1 across): the pixels ox ..
  // last_ox of an output row whose windows lie inside the image and whose
  // last vector read stays inside the input are copied in one loop with no
  // per-pixel bounds (the general per-pixel path below spent about 18
  // cycles a pixel on bookkeeping for a 3x3x3 window's 3 copies; with it
  // MobileNetV2's stem took 122 -> 103 us per call, one Zen 5 thread,
  // bench_core, before kGatherBytes).
  const bool runs = whole && g.dilation_w == 1;
  const int64_t total = end - t.input;
  for (int64_t m = 0; m < rows;) {
    const int64_t image = n * g.in_h * row_bytes;
    const int64_t iy0 = oy * g.stride_h - g.pad_top;
    const int64_t ix0 = ox * g.stride_w - g.pad_left;
    if (runs && ix0 >= 0 && iy0 >= 0 && iy0 + span_h < g.in_h) {
      // The largest ix with ix + kw <= in_w and a last read (of the
      // window's last row, one vector) inside the input.
      const int64_t tail =
          total - Copy::kStep - run - image - (iy0 + span_h) * row_bytes;
      const int64_t ix_max = Min(g.in_w - kw, tail < 0 ? -1 : tail / ci);
      const int64_t last_ox =
          ix_max < 0 ? -1 : Min(g.out_w - 1, (ix_max + g.pad_left) / g.stride_w);
      const int64_t count = Min(rows - m, last_ox - ox + 1);
      if (count > 0) {
        const int8_t* src = t.input + image + iy0 * row_bytes + ix0 * ci;
        const int64_t src_step = g.stride_w * ci;
        uint8_t* row = dst + m * t.lda;
        const bool copied =
            CopyStemWindows<Copy>(g.filter_h, run, row, src, count, src_step, t.lda, ky_step);
        for (int64_t i = 0; i < count && !copied; ++i, src += src_step, row += t.lda) {
          const int8_t* s = src;
          uint8_t* out = row;
          for (int64_t ky = 0; ky < g.filter_h; ++ky) {
            ConvertInterior<Copy>(out, s, run);
            s += ky_step;
            out += run * el;
          }
        }
        m += count;
        ox += count;
        if (ox == g.out_w) {
          ox = 0;
          if (++oy == g.out_h) {
            oy = 0;
            ++n;
          }
        }
        continue;
      }
    }
    uint8_t* row = dst + m * t.lda;
    // Columns [lo, hi) of the window are inside the image (dilation 1).
    const int64_t lo = g.dilation_w == 1 ? Min(kw, Max(0, -ix0)) : 0;
    const int64_t hi = g.dilation_w == 1 ? Max(lo, Min(kw, g.in_w - ix0)) : 0;
    // Offset of the window's first byte (meaningful when inside).
    const int64_t first = image + iy0 * row_bytes + ix0 * ci;
    if (g.dilation_w == 1 && lo == 0 && hi == kw && iy0 >= 0 &&
        iy0 + span_h < g.in_h &&
        first + span_h * row_bytes + run + Copy::kStep <= end - t.input) {
      // Interior window, part of K (the whole of K went through the runs
      // above): each ky is one contiguous run; whole vectors.
      for (int64_t ky = ky0; ky <= ky1; ++ky) {
        const int64_t s = Max(k0, ky * run), e = Min(k1, (ky + 1) * run);
        ConvertInterior<Copy>(row + (s - k0) * el,
                              t.input + first + ky * ky_step + (s - ky * run),
                              e - s);
      }
    } else {
      for (int64_t ky = ky0; ky <= ky1; ++ky) {
        const int64_t base = ky * run;
        const int64_t s = Max(k0, base) - base, e = Min(k1, base + run) - base;
        uint8_t* out = row + (base + s - k0) * el;
        const int64_t iy = iy0 + ky * g.dilation_h;
        if (iy < 0 || iy >= g.in_h) {
          PadRun<Copy>(out, e - s);
          continue;
        }
        const int8_t* in_row = t.input + image + iy * row_bytes;
        if (g.dilation_w == 1) {
          CopySegment<Copy>(out, s, e, 0, lo * ci, nullptr, end);
          CopySegment<Copy>(out, s, e, lo * ci, hi * ci,
                            in_row + (ix0 + lo) * ci, end);
          CopySegment<Copy>(out, s, e, hi * ci, run, nullptr, end);
        } else {
          for (int64_t kx = s / ci; kx <= (e - 1) / ci; ++kx) {
            const int64_t ix = ix0 + kx * g.dilation_w;
            const bool inside = ix >= 0 && ix < g.in_w;
            CopySegment<Copy>(out, s, e, kx * ci, (kx + 1) * ci,
                              inside ? in_row + ix * ci : nullptr, end);
          }
        }
      }
    }
    ++m;
    if (++ox == g.out_w) {
      ox = 0;
      if (++oy == g.out_h) {
        oy = 0;
        ++n;
      }
    }
  }
}

// The A rows of one K panel's micro-tiles during one channel block's pass.
// At the first block (`gather`) they are gathered a few micro-tiles at a
// time (GatherRows) just before their first use, so the stores overlap
// the multiply; later blocks read what the first one gathered. With one
// block the rows are used once, so each gather starts at the buffer's
// start (it stays in L1); otherwise row r lives at t.a + r * t.lda.
template <class Copy>
class PanelRows {
 public:
  PanelRows(const GemmTileArgs& t, bool gather, bool single_block, int64_t k0,
            int64_t k1)
      : t_(t), gather_(gather), single_block_(single_block), k0_(k0), k1_(k1),
        max_rows_(kGatherBytes / t.lda) {}

  // Micro-tile mt of `tiles` (heights base + 1 for the first `extra`, base
  // for the rest), whose first row is r.
  const uint8_t* Rows(int64_t mt, int64_t tiles, int64_t base, int64_t extra,
                      int64_t r) {
    if (gather_ && r >= end_) {
      const int64_t n = GatherRows(mt, tiles, base, extra, max_rows_);
      begin_ = single_block_ ? r : 0;
      Im2ColSlice<Copy>(t_, t_.a + (r - begin_) * t_.lda, r, n, k0_, k1_);
      end_ = r + n;
    }
    return t_.a + (r - begin_) * t_.lda;
  }

 private:
  const GemmTileArgs& t_;
  const bool gather_, single_block_;
  const int64_t k0_, k1_, max_rows_;
  int64_t begin_ = 0, end_ = 0;  // rows [begin_, end_) are in the buffer
};

}  // namespace
}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_GEMM_GEMM_ISA_COMMON_H_
