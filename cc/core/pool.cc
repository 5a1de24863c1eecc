// Copyright tf-fused-int8 authors. Apache 2.0.
#include "cc/core/pool.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "cc/core/cpu/pool/pool_kernels.h"
#include "cc/core/cpu/vector_isa.h"
#include "cc/core/fused_conv.h"

namespace tf_fused_int8 {
namespace {

constexpr int64_t kMaxDim = std::numeric_limits<int32_t>::max();

std::string Str(int64_t v) { return std::to_string(v); }

// a * b for non-negative a, b, or -1 past 2^62.
int64_t MulCapped(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  if (a > (int64_t{1} << 62) / b) return -1;
  return a * b;
}

// One spatial dimension: X' = in + zeros, then TF's SAME / VALID.
std::string OutputSize(const char* dim, int64_t in, int64_t zeros_before,
                       int64_t zeros_after, int64_t window, int64_t stride,
                       Padding padding, int64_t* out, int64_t* pad_before) {
  const int64_t padded = in + zeros_before + zeros_after;  // each < 2^31
  if (padding == Padding::kValid) {
    if (padded < window) {
      return std::string("input ") + dim + " (" + Str(in) + ") plus zero "
             "padding (" + Str(zeros_before) + " + " + Str(zeros_after) +
             ") is smaller than the window " + dim + " (" + Str(window) +
             ") with padding VALID: the output would be empty";
    }
    *out = (padded - window) / stride + 1;
    *pad_before = 0;
    return "";
  }
  *out = (padded + stride - 1) / stride;
  const int64_t total = std::max<int64_t>((*out - 1) * stride + window - padded, 0);
  *pad_before = total / 2;
  return "";
}

// The window cells [*lo, *hi) along one dimension of X' (SAME's ignored
// cells cut off) for output index o.
inline void WindowRange(int64_t o, int64_t stride, int64_t pad, int64_t window,
                        int64_t padded, int64_t* lo, int64_t* hi) {
  const int64_t start = o * stride - pad;
  *lo = std::max<int64_t>(start, 0);
  *hi = std::min<int64_t>(start + window, padded);
}

cpu::MaxPoolRunBody MaxRunBodyFor(KernelPath path) {
  return cpu::BodyForPath<cpu::MaxPoolRunBody>(
      path,
      [](const int8_t* first, int64_t window_rows, int64_t row_bytes, int64_t window_w,
         int64_t stride_w, int64_t count, int64_t channels, int8_t* out) {
        cpu::MaxPoolRunChannels(first, window_rows, row_bytes, window_w, stride_w, count, 0,
                                channels, out);
      },
      TF_FUSED_INT8_X86_BODY(cpu::MaxPoolRunAvx2), TF_FUSED_INT8_X86_BODY(cpu::MaxPoolRunAvx512));
}

cpu::MaxPoolBody MaxBodyFor(KernelPath path) {
  return cpu::BodyForPath<cpu::MaxPoolBody>(
      path,
      [](const int8_t* const* rows, int64_t count, int64_t channels, int8_t init,
         int8_t* out) { cpu::MaxPoolChannels(rows, count, 0, channels, init, out); },
      TF_FUSED_INT8_X86_BODY(cpu::MaxPoolAvx2), TF_FUSED_INT8_X86_BODY(cpu::MaxPoolAvx512));
}

// The average body of `path` for windows of `cells` cells: a vector body
// for windows of at most kAvgPoolVectorMaxCells cells, else the exact int64
// loop.
cpu::AvgPoolBody AvgBodyFor(KernelPath path, int64_t cells) {
  const cpu::AvgPoolBody exact = [](const int8_t* const* rows, int64_t count,
                                    int64_t divisor, int64_t channels, int8_t* out) {
    cpu::AvgPoolChannels(rows, count, divisor, 0, channels, out);
  };
  if (cells > cpu::kAvgPoolVectorMaxCells) return exact;
  return cpu::BodyForPath<cpu::AvgPoolBody>(
      path, exact, TF_FUSED_INT8_X86_BODY(cpu::AvgPoolAvx2),
      TF_FUSED_INT8_X86_BODY(cpu::AvgPoolAvx512));
}

// Output rows [begin, end) of the flattened (batch, out_h). For each output
// pixel: emit(cells, count, zeros, divisor, dst) with its window's input
// cells (count of them), whether the window holds zero padding cells, and
// its number of cells of X' (zeros included; SAME's ignored cells not).
// With a `run` body (max pooling), the interior pixels of a row (their
// windows' columns all inside the input, no zero rows) go to it in one call
// per row instead (cpu::MaxPoolRunBody). With a `flat` average body at
// stride 1 across, they go to it as one "pixel" whose channels are the
// run's bytes: at stride 1 the run's output byte i (pixel i / c, channel
// i % c) is the sum of byte i after each window cell of the run's first
// pixel (that pixel's cells read at the same offset i), over the same
// divisor (its window's cells, every interior window's count in that
// row), so the body's per-byte sum and division give the same bytes as
// one call per pixel, 32 or 64 bytes a vector whatever the channel count.
template <typename Emit>
void PoolRows(const Emit& emit, const int8_t* x, const PoolGeometry& g,
              int8_t* out, int64_t begin, int64_t end,
              cpu::MaxPoolRunBody run = nullptr,
              cpu::AvgPoolBody flat = nullptr) {
  if (g.stride_w != 1) flat = nullptr;
  const int64_t hp = g.in_h + g.zero_top + g.zero_bottom;
  const int64_t wp = g.in_w + g.zero_left + g.zero_right;
  const int64_t c = g.channels;
  std::vector<const int8_t*> cells(
      static_cast<size_t>(g.window_h * g.window_w));
  // The input rows [*lo, *hi) of output row oh's window (X' rows minus the
  // zero rows; empty when the window holds zero rows only).
  auto input_rows = [&](int64_t oh, int64_t* lo, int64_t* hi, bool* zeros,
                        int64_t* padded_rows) {
    int64_t h0, h1;
    WindowRange(oh, g.stride_h, g.pad_top, g.window_h, hp, &h0, &h1);
    *padded_rows = h1 - h0;
    *lo = std::max<int64_t>(h0, g.zero_top) - g.zero_top;
    *hi = std::max(*lo, std::min<int64_t>(h1, g.zero_top + g.in_h) - g.zero_top);
    *zeros = h0 < g.zero_top || h1 > g.zero_top + g.in_h;
  };
  const int64_t row_bytes = g.in_w * c;
  // The input cells of rows [ih0, ih1) x columns [iw0, iw1) of `image`
  // into `cells`; returns their count.
  auto gather = [&](const int8_t* image, int64_t ih0, int64_t ih1, int64_t iw0, int64_t iw1) {
    int64_t count = 0;
    for (int64_t ih = ih0; ih < ih1; ++ih) {
      for (int64_t iw = iw0; iw < iw1; ++iw) {
        cells[static_cast<size_t>(count++)] = image + (ih * g.in_w + iw) * c;
      }
    }
    return count;
  };
  // The interior output columns [ow_lo, ow_hi): X' window columns [start,
  // start + window_w) with start = ow * stride_w - pad_left inside the
  // input's columns [zero_left, zero_left + in_w) (no zero cell, not cut by
  // SAME).
  int64_t ow_lo = 0, ow_hi = 0;
  if ((run != nullptr || flat != nullptr) && g.in_w >= g.window_w) {
    ow_lo = (g.zero_left + g.pad_left + g.stride_w - 1) / g.stride_w;
    ow_hi = std::min<int64_t>(
        g.out_w, (g.zero_left + g.in_w - g.window_w + g.pad_left) / g.stride_w + 1);
  }
  for (int64_t r = begin; r < end; ++r) {
    const int64_t n = r / g.out_h, oh = r % g.out_h;
    int64_t ih0, ih1, padded_rows;
    bool zero_rows;
    input_rows(oh, &ih0, &ih1, &zero_rows, &padded_rows);
    const int8_t* image = x + n * g.in_h * row_bytes;
    // The input rows the next output row reads first (past this row's):
    // prefetched while this row is pooled, so that a cold input streams in
    // (20 distinct 112x112x64 inputs in a graph, ResNet50's stem pool, one
    // Zen 5 thread: 270-330 us per op without, 155-165 with, against
    // 210-280 for TF's Pad + MaxPool, whose copy streams the input).
    if (r + 1 < end && oh + 1 < g.out_h) {
      int64_t next0, next1, unused_rows;
      bool unused;
      input_rows(oh + 1, &next0, &next1, &unused, &unused_rows);
      for (int64_t ih = std::max(next0, ih1); ih < next1; ++ih) {
        const int8_t* line = image + ih * row_bytes;
        for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(line + b);
      }
    }
    int8_t* dst = out + r * g.out_w * c;
    for (int64_t ow = 0; ow < g.out_w; ++ow, dst += c) {
      if (ow == ow_lo && ow_hi > ow_lo && !zero_rows && ih1 > ih0) {
        const int64_t iw = ow * g.stride_w - g.pad_left - g.zero_left;
        if (run != nullptr) {
          run(image + ih0 * row_bytes + iw * c, ih1 - ih0, row_bytes, g.window_w, g.stride_w,
              ow_hi - ow_lo, c, dst);
        } else {
          const int64_t count = gather(image, ih0, ih1, iw, iw + g.window_w);
          flat(cells.data(), count, count, (ow_hi - ow_lo) * c, dst);
        }
        dst += (ow_hi - ow_lo - 1) * c;
        ow = ow_hi - 1;
        continue;
      }
      int64_t w0, w1;
      WindowRange(ow, g.stride_w, g.pad_left, g.window_w, wp, &w0, &w1);
      const int64_t iw0 = std::max<int64_t>(w0, g.zero_left) - g.zero_left;
      const int64_t iw1 =
          std::min<int64_t>(w1, g.zero_left + g.in_w) - g.zero_left;
      const bool zeros =
          zero_rows || w0 < g.zero_left || w1 > g.zero_left + g.in_w;
      const int64_t count = gather(image, ih0, ih1, iw0, iw1);
      emit(cells.data(), count, zeros, padded_rows * (w1 - w0), dst);
    }
  }
}

}  // namespace

std::string ComputePoolGeometry(Padding padding, PoolGeometry* g) {
  if (padding != Padding::kSame && padding != Padding::kValid) {
    return "padding must be SAME or VALID";
  }
  const struct {
    const char* name;
    int64_t value, min;
  } dims[] = {
      {"batch", g->batch, 0},           {"input height", g->in_h, 0},
      {"input width", g->in_w, 0},      {"channels", g->channels, 0},
      {"window height", g->window_h, 1}, {"window width", g->window_w, 1},
      {"stride height", g->stride_h, 1}, {"stride width", g->stride_w, 1},
      {"zero padding top", g->zero_top, 0},
      {"zero padding bottom", g->zero_bottom, 0},
      {"zero padding left", g->zero_left, 0},
      {"zero padding right", g->zero_right, 0},
  };
  for (const auto& d : dims) {
    if (d.value < d.min || d.value > kMaxDim) {
      return std::string(d.name) + " must be in [" + Str(d.min) + ", " +
             Str(kMaxDim) + "], got " + Str(d.value);
    }
  }
  if (g->in_h + g->zero_top + g->zero_bottom > kMaxDim ||
      g->in_w + g->zero_left + g->zero_right > kMaxDim) {
    return "input plus zero padding must be at most " + Str(kMaxDim) +
           " per dimension";
  }
  if (MulCapped(g->window_h, g->window_w) < 0 ||
      g->window_h * g->window_w > kMaxDim) {
    return "window height * width must be at most " + Str(kMaxDim);
  }
  std::string err = OutputSize("height", g->in_h, g->zero_top, g->zero_bottom,
                               g->window_h, g->stride_h, padding, &g->out_h,
                               &g->pad_top);
  if (err.empty()) {
    err = OutputSize("width", g->in_w, g->zero_left, g->zero_right,
                     g->window_w, g->stride_w, padding, &g->out_w,
                     &g->pad_left);
  }
  if (!err.empty()) return err;
  int64_t in = g->batch, out = g->batch;
  for (int64_t d : {g->in_h, g->in_w, g->channels}) in = in < 0 ? -1 : MulCapped(in, d);
  for (int64_t d : {g->out_h, g->out_w, g->channels}) out = out < 0 ? -1 : MulCapped(out, d);
  if (in < 0 || out < 0) return "input or output element count exceeds 2^62";
  return "";
}

void MaxPoolInt8(const int8_t* x, const PoolGeometry& g, int8_t* out,
                 const ParallelFor& parallel_for) {
  const KernelPath path = cpu::ElementwiseKernelPath();
  MaxPoolInt8(x, g, out, parallel_for, path);
}

void MaxPoolInt8(const int8_t* x, const PoolGeometry& g, int8_t* out,
                 const ParallelFor& parallel_for, KernelPath path) {
  const int64_t rows = g.batch * g.out_h;
  if (rows == 0 || g.out_w == 0 || g.channels == 0) return;
  const cpu::MaxPoolBody body = MaxBodyFor(path);
  const cpu::MaxPoolRunBody run = MaxRunBodyFor(path);
  const int64_t c = g.channels;
  auto emit = [body, c](const int8_t* const* cells, int64_t count, bool zeros,
                        int64_t /*divisor*/, int8_t* dst) {
    body(cells, count, c, static_cast<int8_t>(zeros ? 0 : -128), dst);
  };
  // Cost of one output row, in cycles: about one VPMAXSB (and its load) per
  // window cell and 64 channels, two a cycle, plus the row's bookkeeping.
  // ResNet50's stem pool (3x3 / 2 over 112x112x64, 56 rows of 56) is then
  // 56 rows * 56 * (9 / 2 + 8) ~ 38000 cycles in all: below the pool's
  // inline threshold (60000, cc/tf/pool_parallel_for.cc), it runs on the
  // calling thread unless a helper is already spinning (after the stem
  // convolution in a model, it is). Its interior pixels run as one run body
  // call per row (cpu::MaxPoolRunBody): one Zen 5 thread, the core alone,
  // best of 7, 40.8 -> 15.0 us (avx512vnni), 43.4 -> 15.8 us (avx2); in
  // ResNet50 through InferenceRunner (TF's profiler) 45 -> 24 us on one
  // thread, 12.7 us on two.
  const int64_t per_row =
      g.out_w * (g.window_h * g.window_w * ((g.channels + 63) / 64) / 2 + 8);
  parallel_for(rows, std::max<int64_t>(per_row, 1),
               [&](int64_t begin, int64_t end) {
                 PoolRows(emit, x, g, out, begin, end, run);
               });
}

void AvgPoolInt8(const int8_t* x, const PoolGeometry& g, int8_t* out,
                 const ParallelFor& parallel_for) {
  AvgPoolInt8(x, g, out, parallel_for, cpu::ElementwiseKernelPath());
}

// Why the vector bodies' float32 division is exact (pool_kernels.h): with
// |S| < 2^15 and 1 <= D < 2^16 both are exact floats. If S / D is a tie
// (k + 1/2), it is exactly representable, so the correctly rounded VDIVPS
// returns it and VCVTPS2DQ rounds it to even as the exact rational is.
// Otherwise S / D lies at least 1 / (2D) > 2^-17 away from every
// half-integer, while |S / D| <= 128 puts the division's error within half
// an ulp of 128, 2^-17: the float quotient stays on the same side of every
// half-integer and never lands on one, so it rounds to the same integer.
void AvgPoolInt8(const int8_t* x, const PoolGeometry& g, int8_t* out,
                 const ParallelFor& parallel_for, KernelPath path) {
  const int64_t rows = g.batch * g.out_h;
  if (rows == 0 || g.out_w == 0 || g.channels == 0) return;
  const cpu::AvgPoolBody body = AvgBodyFor(path, g.window_h * g.window_w);
  const int64_t c = g.channels;
  auto emit = [body, c](const int8_t* const* cells, int64_t count,
                        bool /*zeros*/, int64_t divisor, int8_t* dst) {
    body(cells, count, divisor, c, dst);
  };
  // Cost of one output row, in cycles: about three uops (load, widen, add)
  // per window cell and 32 channels, two a cycle, and about 16 per 16
  // channels for the division and the packing.
  const int64_t blocks = (g.channels + 31) / 32;
  const int64_t per_row =
      g.out_w * (g.window_h * g.window_w * blocks * 3 / 2 + 16 * blocks + 8);
  // The interior of each row as one body call at stride 1 (PoolRows'
  // flat): the vector bodies' cost is per 32 or 64 bytes whatever the
  // channels, where per-pixel calls left vectors partly empty under 64
  // channels and set up every pixel's window (every body computes byte by
  // byte, the exact one too).
  parallel_for(rows, std::max<int64_t>(per_row, 1),
               [&](int64_t begin, int64_t end) {
                 PoolRows(emit, x, g, out, begin, end, nullptr, body);
               });
}

namespace {

// The references' walk, written the obvious way: for each output element,
// the values of its window's cells of X' (zero-padding cells as 0, SAME's
// cells outside X' left out), reduced to the output byte by `reduce`.
template <typename Reduce>
void PoolReference(const int8_t* x, const PoolGeometry& g, int8_t* out,
                   Reduce reduce) {
  const int64_t hp = g.in_h + g.zero_top + g.zero_bottom;
  const int64_t wp = g.in_w + g.zero_left + g.zero_right;
  std::vector<int> cells;
  for (int64_t n = 0; n < g.batch; ++n) {
    for (int64_t oh = 0; oh < g.out_h; ++oh) {
      for (int64_t ow = 0; ow < g.out_w; ++ow) {
        for (int64_t c = 0; c < g.channels; ++c) {
          cells.clear();
          for (int64_t kh = 0; kh < g.window_h; ++kh) {
            for (int64_t kw = 0; kw < g.window_w; ++kw) {
              const int64_t ph = oh * g.stride_h - g.pad_top + kh;
              const int64_t pw = ow * g.stride_w - g.pad_left + kw;
              if (ph < 0 || ph >= hp || pw < 0 || pw >= wp) continue;
              const int64_t ih = ph - g.zero_top, iw = pw - g.zero_left;
              const bool real = ih >= 0 && ih < g.in_h && iw >= 0 && iw < g.in_w;
              cells.push_back(
                  real ? x[((n * g.in_h + ih) * g.in_w + iw) * g.channels + c] : 0);
            }
          }
          out[((n * g.out_h + oh) * g.out_w + ow) * g.channels + c] = reduce(cells);
        }
      }
    }
  }
}

}  // namespace

void MaxPoolInt8Reference(const int8_t* x, const PoolGeometry& g,
                          int8_t* out) {
  PoolReference(x, g, out, [](const std::vector<int>& cells) {
    int best = std::numeric_limits<int>::min();
    for (int v : cells) best = std::max(best, v);
    return static_cast<int8_t>(best);
  });
}

void AvgPoolInt8Reference(const int8_t* x, const PoolGeometry& g,
                          int8_t* out) {
  PoolReference(x, g, out, [](const std::vector<int>& cells) {
    int64_t sum = 0;
    for (int v : cells) sum += v;
    // |sum| < 2^39 and cells < 2^31: the double quotient is within 2^-45 of
    // the exact one, far closer than the 1 / (2 * cells) that separates a
    // non-tie from a half-integer, and a tie is exact.
    return static_cast<int8_t>(std::nearbyint(
        static_cast<double>(sum) / static_cast<double>(cells.size())));
  });
}

}  // namespace tf_fused_int8
