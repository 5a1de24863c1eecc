// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The depthwise driver (see depthwise.h) and the portable row kernel.
#include "cc/core/cpu/depthwise/depthwise.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <tuple>
#include <vector>

#include "cc/core/cpu/bounded_lru.h"
#include "cc/core/cpu/depthwise/depthwise_identity.h"
#include "cc/core/epilogue.h"
#include "cc/core/fused_conv.h"

namespace tf_fused_int8 {
namespace cpu {
namespace {

// Output bytes per lookup-table slice of rows (RunDepthwise).
constexpr int64_t kLutSliceBytes = 32 << 10;
// A unit's rows run in bands whose input rows take about this many bytes,
// so that a band's input, read from L3 or memory by the first channel block
// of a row kernel that runs blocks outer and rows inner, is still in L2 for
// the other blocks (whole units streamed it from L3 once per block where
// they held more than L2: batch 8, or one thread on a 112x112x96 input).
// bench_core, Zen 4 VM (L2 1 MiB), input told non-negative, 4-5 rounds
// alternated, against whole units: batch 8, two threads, avx512vnni
// 56x56x144 0.95x the time, 112x112x96 / 2 0.83x, 112x112x32 (one block)
// 1.01x, avx2 56x56x144 0.86x; batch 8, one thread, 56x56x144 0.93x
// (avx512vnni), 28x28x240 5x5 signed 0.92x (avx2); batch 1, one or two
// threads, 1.00-1.02x (112x112x96 / 2 0.96-0.99x on one). 64 KiB bands
// measured about the same. The sequence op runs batch-8 depthwise steps
// image by image already (MobileNetV2's in TF: unchanged by this), so this
// is for single calls (the ops and layers outside a sequence).
constexpr int64_t kBandInputBytes = 256 << 10;

int64_t RoundUpTo(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Floor division for a possibly negative numerator, positive divisor.
int64_t FloorDiv(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

// Taps k in [0, k_size) with 0 <= base + k * dilation < in_size.
void TapRange(int64_t base, int64_t dilation, int64_t k_size, int64_t in_size,
              int64_t* begin, int64_t* end) {
  int64_t b = base >= 0 ? 0 : (-base + dilation - 1) / dilation;
  int64_t e = FloorDiv(in_size - 1 - base, dilation) + 1;
  b = std::min(b, k_size);
  e = std::max(b, std::min(e, k_size));
  *begin = b;
  *end = e;
}

}  // namespace

void ComputeWindowRanges(const ConvGeometry& g, WindowRanges* r) {
  r->ky.assign(static_cast<size_t>(2 * g.out_h), 0);
  r->kx.assign(static_cast<size_t>(2 * g.out_w), 0);
  for (int64_t oy = 0; oy < g.out_h; ++oy) {
    TapRange(oy * g.stride_h - g.pad_top, g.dilation_h, g.filter_h, g.in_h,
             &r->ky[2 * oy], &r->ky[2 * oy + 1]);
  }
  r->full_begin = r->full_end = g.out_w;
  for (int64_t ox = 0; ox < g.out_w; ++ox) {
    TapRange(ox * g.stride_w - g.pad_left, g.dilation_w, g.filter_w, g.in_w,
             &r->kx[2 * ox], &r->kx[2 * ox + 1]);
    const bool full = r->kx[2 * ox] == 0 && r->kx[2 * ox + 1] == g.filter_w;
    if (full && r->full_begin == g.out_w) r->full_begin = ox;
    if (full) r->full_end = ox + 1;
  }
  // The full columns are contiguous (the window slides monotonically).
}

void FillDirectRowArgs(const FusedConvArgs& a, const WindowRanges& r,
                       DirectRowArgs* d) {
  d->side = a.HasSideInput() ? a.side_input : nullptr;
  d->side_scale = a.side_input_scale;
  int32_t lo, hi;
  OutputBounds(a, &lo, &hi);
  d->lo = static_cast<int8_t>(lo);
  d->hi = static_cast<int8_t>(hi);
  d->output = a.output;
  d->ky_range = r.ky.data();
  d->kx_range = r.kx.data();
  d->full_begin = r.full_begin;
  d->full_end = r.full_end;
  d->row_begin = d->row_end = 0;
  d->input_non_negative = a.input_non_negative;
}

void DepthwiseIdentityRowsPortable(const DepthwiseRowArgs& d) {
  IdentityRows(d, [](const int8_t* src, int64_t n, int8_t lo, int8_t hi, int8_t* dst) {
    ClipBytes(src, 0, n, lo, hi, dst);
  });
}

void DepthwiseRowsPortable(const DepthwiseRowArgs& d) {
  const ConvGeometry& g = *d.geo;
  const int64_t c_count = d.channels;
  const float lo = d.lo, hi = d.hi;
  std::vector<int32_t> acc(static_cast<size_t>(c_count));
  for (int64_t r = d.row_begin; r < d.row_end; ++r) {
    const int64_t n = r / g.out_h, oy = r % g.out_h;
    const int64_t iy0 = oy * g.stride_h - g.pad_top;
    const int64_t ky0 = d.ky_range[2 * oy], ky1 = d.ky_range[2 * oy + 1];
    for (int64_t ox = 0; ox < g.out_w; ++ox) {
      const int64_t ix0 = ox * g.stride_w - g.pad_left;
      const int64_t kx0 = d.kx_range[2 * ox], kx1 = d.kx_range[2 * ox + 1];
      std::fill(acc.begin(), acc.end(), 0);
      for (int64_t ky = ky0; ky < ky1; ++ky) {
        const int64_t iy = iy0 + ky * g.dilation_h;
        for (int64_t kx = kx0; kx < kx1; ++kx) {
          const int64_t ix = ix0 + kx * g.dilation_w;
          const int8_t* in = d.input + ((n * g.in_h + iy) * g.in_w + ix) * c_count;
          const int8_t* w = d.filter + (ky * g.filter_w + kx) * c_count;
          for (int64_t c = 0; c < c_count; ++c) {
            acc[c] += static_cast<int32_t>(in[c]) * static_cast<int32_t>(w[c]);
          }
        }
      }
      const int64_t o = (r * g.out_w + ox) * c_count;
      for (int64_t c = 0; c < c_count; ++c) {
        d.output[o + c] = EpilogueScalar(
            acc[c], d.scale[c], d.bias[c], d.side != nullptr,
            d.side != nullptr ? d.side[o + c] : int8_t{0}, d.side_scale, lo, hi);
      }
    }
  }
}

void DepthwiseGlobalRowsPortable(const DepthwiseRowArgs& d) {
  const ConvGeometry& g = *d.geo;
  const int64_t cc = d.channels, pixels = g.in_h * g.in_w;
  const float lo = d.lo, hi = d.hi;
  std::vector<int32_t> sum(static_cast<size_t>(cc));
  std::vector<int16_t> part(static_cast<size_t>(cc));
  for (int64_t r = d.row_begin; r < d.row_end; ++r) {
    const int8_t* x = d.input + r * pixels * cc;
    std::fill(sum.begin(), sum.end(), 0);
    for (int64_t p0 = 0; p0 < pixels; p0 += kChannelSumsRun) {
      std::fill(part.begin(), part.end(), int16_t{0});
      const int64_t p1 = std::min(pixels, p0 + kChannelSumsRun);
      for (int64_t p = p0; p < p1; ++p) {
        const int8_t* row = x + p * cc;
        int16_t* acc = part.data();
        for (int64_t c = 0; c < cc; ++c) acc[c] = static_cast<int16_t>(acc[c] + row[c]);
      }
      for (int64_t c = 0; c < cc; ++c) sum[c] += part[c];
    }
    for (int64_t c = 0; c < cc; ++c) {
      const int32_t acc = sum[c] * static_cast<int32_t>(d.filter[c]);
      d.output[r * cc + c] = EpilogueScalar(
          acc, d.scale[c], d.bias[c], d.side != nullptr,
          d.side != nullptr ? d.side[r * cc + c] : int8_t{0}, d.side_scale, lo, hi);
    }
  }
}

namespace {

std::atomic<bool> g_cache_enabled{true};

// How many scale values a call passes (one, or one per channel).
int64_t ScaleCount(const FusedConvArgs& a) {
  return a.per_channel_scale ? a.geo.out_c : 1;
}

// What RunDepthwise prepares from a call's weights (depthwise.h), and the
// operands it was prepared from.
struct PreparedWeights {
  // The operands: compared with the call's on every cache hit.
  std::vector<int8_t> filter;  // [taps, channels]
  std::vector<float> scale_in;  // 1 or channels values, as the call gave them
  std::vector<float> bias_in;   // [channels]
  // What the row kernels read.
  std::vector<float> scale, bias;  // [padded_c] (scale broadcast when scalar)
  // Their largest magnitudes, NaNs ignored (UpperClampNeeded, epilogue.h).
  float max_abs_scale = 0.0f, max_abs_bias = 0.0f;
  std::unique_ptr<int32_t[]> wide;  // [wide_taps, padded_c]
  int64_t tap_stride = 0;           // DepthwiseRowArgs::tap_stride
  // One tap, every weight 1, every scale 1 and every bias 0 (-0 too): an
  // identity call where the geometry allows (depthwise_identity.h).
  bool identity_weights = false;
  std::unique_ptr<void, decltype(&std::free)> prepared{nullptr, &std::free};
  int64_t bytes = 0;

  // Whether a's weights, scale and bias are byte for byte the ones these
  // were prepared from (bytes: a NaN scale or bias matches itself).
  bool Matches(const FusedConvArgs& a) const {
    const int64_t c = a.geo.out_c;
    return static_cast<int64_t>(scale_in.size()) == ScaleCount(a) &&
           std::memcmp(filter.data(), a.filter, filter.size()) == 0 &&
           std::memcmp(scale_in.data(), a.conv_input_scale,
                       scale_in.size() * sizeof(float)) == 0 &&
           std::memcmp(bias_in.data(), a.bias, c * sizeof(float)) == 0;
  }
};

// Prepares a's weights for the row kernel whose preparation is `prep`
// (nullptr: only widened weights). `base` holds the call's geometry,
// filter, channels and padded_c.
std::shared_ptr<const PreparedWeights> Prepare(const FusedConvArgs& a,
                                               const DepthwiseRowArgs& base,
                                               const DepthwisePrep* prep) {
  const ConvGeometry& g = a.geo;
  const int64_t c_count = g.out_c;
  const int64_t padded = base.padded_c;
  const int64_t taps = g.filter_h * g.filter_w;
  auto w = std::make_shared<PreparedWeights>();
  w->filter.assign(a.filter, a.filter + taps * c_count);
  w->scale_in.assign(a.conv_input_scale, a.conv_input_scale + ScaleCount(a));
  w->bias_in.assign(a.bias, a.bias + c_count);
  w->scale.assign(static_cast<size_t>(padded), 0.0f);
  w->bias.assign(static_cast<size_t>(padded), 0.0f);
  for (int64_t c = 0; c < c_count; ++c) {
    w->scale[c] = a.conv_input_scale[a.per_channel_scale ? c : 0];
    w->bias[c] = a.bias[c];
  }
  w->max_abs_scale = AbsMaxIgnoringNaN(w->scale.data(), c_count);
  w->max_abs_bias = AbsMaxIgnoringNaN(w->bias.data(), c_count);
  w->identity_weights = taps == 1;
  for (int64_t c = 0; w->identity_weights && c < c_count; ++c) {
    w->identity_weights = a.filter[c] == 1 && w->scale[c] == 1.0f && w->bias[c] == 0.0f;
  }
  DepthwiseRowArgs d = base;
  d.scale = w->scale.data();
  d.bias = w->bias.data();
  // Widened weights: int8 in the low 16 bits, zero high half (depthwise.h),
  // for the channels the row kernel reads them for ([wide_from, padded),
  // padding lanes zero; a 3x3 call on AVX-512 with whole 64-channel blocks
  // reads none). Lanes below wide_from are never read.
  const int64_t wide_from = prep != nullptr ? prep->wide_from(d) : 0;
  // One tap's worth when every tap of each channel has the same weight
  // (DepthwiseRowArgs::tap_stride 0).
  bool uniform = taps > 1;
  for (int64_t i = c_count; uniform && i < taps * c_count; ++i) {
    uniform = a.filter[i] == a.filter[i % c_count];
  }
  const int64_t wide_taps = uniform ? 1 : taps;
  w->tap_stride = uniform ? 0 : padded;
  d.tap_stride = w->tap_stride;
  w->wide.reset(new int32_t[static_cast<size_t>(wide_taps * padded)]);
  for (int64_t t = 0; t < wide_taps; ++t) {
    int32_t* wt = w->wide.get() + t * padded;
    for (int64_t c = wide_from; c < c_count; ++c) {
      wt[c] = static_cast<int32_t>(
          static_cast<uint16_t>(static_cast<int16_t>(a.filter[t * c_count + c])));
    }
    for (int64_t c = std::max(wide_from, c_count); c < padded; ++c) wt[c] = 0;
  }
  d.wide = w->wide.get();
  int64_t prep_bytes = 0;
  if (prep != nullptr) {
    prep_bytes = RoundUpTo(prep->bytes(d), 64);
    if (prep_bytes > 0) {
      w->prepared.reset(std::aligned_alloc(64, static_cast<size_t>(prep_bytes)));
      if (w->prepared == nullptr) throw std::bad_alloc();
      prep->fill(d, w->prepared.get());
    }
  }
  w->bytes = taps * c_count + (ScaleCount(a) + c_count + 2 * padded) *
             static_cast<int64_t>(sizeof(float)) +
             wide_taps * padded * static_cast<int64_t>(sizeof(int32_t)) + prep_bytes;
  return w;
}

// The process-wide cache of prepared weights (depthwise.h). Key: the
// filter's address and what the preparation depends on besides the operands'
// values (filter size, channels, stride and dilation, scale count, the row
// kernel's preparation). A hit is used after PreparedWeights::Matches
// compares the operands (filter, scale and bias: 1-63 KB for MobileNetV2's
// layers), so a changed or reused buffer is prepared again; except where
// both the entry and the call pin the filter and the epilogue
// (FusedConvArgs::filter_pin and epilogue_pin, the TF ops' variables) and
// the call's bias and scale are where the entry's were: the entry holds its
// pins, so the buffers at those addresses have kept the bytes it was
// prepared from. The comparison had cost MobileNetV2 about 190
// KB of memcmp per call (its 17 depthwise layers and the 7x7 average), 0.4-
// 0.5% of the op's thread on one thread (perf, Zen 5), all of it serial.
class PreparedCache {
 public:
  static PreparedCache& Global() {
    static PreparedCache* c = new PreparedCache();  // never destroyed
    return *c;
  }

  std::shared_ptr<const PreparedWeights> Get(const FusedConvArgs& a,
                                             const DepthwiseRowArgs& base,
                                             const DepthwisePrep* prep) {
    const ConvGeometry& g = a.geo;
    const Key key{a.filter, g.filter_h, g.filter_w, g.out_c, g.stride_w,
                  g.dilation_h, g.dilation_w, a.per_channel_scale, prep};
    const bool pinned = a.filter_pin != nullptr && a.epilogue_pin != nullptr;
    Entry found;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (Entry* e = lru_.Find(key)) {
        if (pinned && e->filter_pin != nullptr && e->bias == a.bias &&
            e->scale == a.conv_input_scale) {
          ++stats_.hits;
          ++stats_.pinned_hits;
          return e->weights;
        }
        found = *e;
      }
    }
    if (found.weights != nullptr && found.weights->Matches(a)) {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.hits;
      // The call's pins now vouch for the bytes the entry was compared
      // with: later pinned calls use it unchecked.
      if (pinned) {
        if (Entry* e = lru_.Find(key)) {
          if (e->weights == found.weights) {
            Entry held = *e;
            held.PinTo(a);
            Insert(key, std::move(held));
          }
        }
      }
      return found.weights;
    }
    Entry fresh;
    fresh.weights = Prepare(a, base, prep);
    if (pinned) fresh.PinTo(a);
    std::lock_guard<std::mutex> lock(mu_);
    ++(found.weights != nullptr ? stats_.stale : stats_.misses);
    std::shared_ptr<const PreparedWeights> w = fresh.weights;
    Insert(key, std::move(fresh));
    return w;
  }

  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    lru_.Clear();
  }

  DepthwiseCacheStats Stats() {
    std::lock_guard<std::mutex> lock(mu_);
    DepthwiseCacheStats s = stats_;
    s.entries = lru_.size();
    s.bytes = lru_.bytes();
    s.pinned_entries = lru_.pinned_size();
    return s;
  }

 private:
  // A pinned entry (see above) holds both pins and the addresses of the
  // bias and scale they vouch for; an unpinned one neither.
  struct Entry {
    std::shared_ptr<const PreparedWeights> weights;
    std::shared_ptr<const WeightPin> filter_pin, epilogue_pin;
    const float* bias = nullptr;
    const float* scale = nullptr;
    // Takes a's pins and the addresses they vouch for.
    void PinTo(const FusedConvArgs& a) {
      filter_pin = a.filter_pin;
      epilogue_pin = a.epilogue_pin;
      bias = a.bias;
      scale = a.conv_input_scale;
    }
  };
  struct Key {
    const int8_t* filter;
    int64_t kh, kw, channels, stride_w, dilation_h, dilation_w;
    bool per_channel_scale;
    const DepthwisePrep* prep;
    bool operator==(const Key& o) const {
      return std::tie(filter, kh, kw, channels, stride_w, dilation_h,
                      dilation_w, per_channel_scale, prep) ==
             std::tie(o.filter, o.kh, o.kw, o.channels, o.stride_w,
                      o.dilation_h, o.dilation_w, o.per_channel_scale, o.prep);
    }
    struct Hash {
      size_t operator()(const Key& k) const {
        size_t h = HashMix(0, reinterpret_cast<uintptr_t>(k.filter));
        h = HashMix(h, static_cast<uint64_t>(k.kh) << 32 | static_cast<uint64_t>(k.kw));
        h = HashMix(h, static_cast<uint64_t>(k.channels) << 32 ^
                           static_cast<uint64_t>(k.stride_w));
        h = HashMix(h, static_cast<uint64_t>(k.dilation_h) << 32 ^
                           static_cast<uint64_t>(k.dilation_w));
        h = HashMix(h, reinterpret_cast<uintptr_t>(k.prep));
        return HashMix(h, k.per_channel_scale ? 1 : 0);
      }
    };
  };
  // Requires mu_. A pinned entry goes outside the bounds (bounded_lru.h)
  // while both its pins are Held(); every insertion first drops those whose
  // pins no longer are.
  void Insert(const Key& key, Entry e) {
    stats_.released += lru_.DropPinnedIf([](const Entry& x) {
      return !x.filter_pin->Held() || !x.epilogue_pin->Held();
    });
    const int64_t bytes = e.weights->bytes;
    if (e.filter_pin != nullptr) {
      lru_.InsertPinned(key, std::move(e), bytes);
    } else {
      stats_.evictions += lru_.Insert(key, std::move(e), bytes);
    }
  }

  std::mutex mu_;
  BoundedLru<Key, Entry, Key::Hash> lru_{
      kDepthwiseCacheMaxEntries, kDepthwiseCacheMaxBytes};
  DepthwiseCacheStats stats_;
};

}  // namespace

void SetDepthwiseCacheForTesting(bool enabled) { g_cache_enabled.store(enabled); }

DepthwiseCacheStats GetDepthwiseCacheStats() {
  return PreparedCache::Global().Stats();
}

void ClearDepthwiseCacheForTesting() { PreparedCache::Global().Clear(); }

namespace {

std::atomic<int64_t> g_identity_calls{0};  // DepthwiseIdentityCallsForTesting

// One output pixel whose window is the whole image, no padding: a global
// average pooling (quantize_model's GlobalAveragePooling2D, EfficientNet's
// squeeze-excite squeeze) when every tap of a channel has the same weight.
bool GlobalWindow(const ConvGeometry& g) {
  return g.out_h == 1 && g.out_w == 1 && g.filter_h == g.in_h && g.filter_w == g.in_w &&
         g.pad_top == 0 && g.pad_bottom == 0 && g.pad_left == 0 && g.pad_right == 0 &&
         g.in_c == g.out_c;
}

}  // namespace

int64_t DepthwiseIdentityCallsForTesting() {
  return g_identity_calls.load(std::memory_order_relaxed);
}

void RunDepthwise(const FusedConvArgs& a, DepthwiseRowsFn rows,
                  const ParallelFor& parallel_for, const DepthwisePrep* prep,
                  LutBody lut, DepthwiseRowsFn global_rows,
                  DepthwiseRowsFn identity_rows) {
  const ConvGeometry& g = a.geo;
  const int64_t c_count = g.out_c;
  const int64_t multiplier = g.out_c / g.in_c;
  const int64_t padded = RoundUpTo(c_count, kDepthwiseChannelAlign);
  const int64_t taps = g.filter_h * g.filter_w;

  // Channel multiplier M > 1: input channel c feeds output channels
  // [c * M, (c + 1) * M); expand it so that output channel j reads channel j.
  std::vector<int8_t> expanded;
  const int8_t* input = a.input;
  if (multiplier > 1) {
    const int64_t pixels = g.batch * g.in_h * g.in_w;
    expanded.resize(static_cast<size_t>(pixels * c_count));
    parallel_for(pixels, c_count, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const int8_t* src = a.input + p * g.in_c;
        int8_t* dst = expanded.data() + p * c_count;
        for (int64_t c = 0; c < g.in_c; ++c) {
          for (int64_t m = 0; m < multiplier; ++m) dst[c * multiplier + m] = src[c];
        }
      }
    });
    input = expanded.data();
  }

  WindowRanges ranges;
  ComputeWindowRanges(g, &ranges);

  DepthwiseRowArgs base;
  FillDirectRowArgs(a, ranges, &base);
  base.geo = &g;
  base.input = input;
  base.filter = a.filter;
  base.channels = c_count;
  base.padded_c = padded;
  // The weights, scale and bias as the row kernel reads them: made once per
  // filter and kept (PreparedCache), or per call in the tests' uncached mode.
  const std::shared_ptr<const PreparedWeights> w =
      g_cache_enabled.load(std::memory_order_relaxed)
          ? PreparedCache::Global().Get(a, base, prep)
          : Prepare(a, base, prep);
  base.scale = w->scale.data();
  base.bias = w->bias.data();
  // |acc| <= taps * 2^14 per output channel (one input channel's taps).
  base.clamp_hi = UpperClampNeeded(base.hi, MaxAbsAcc(taps), w->max_abs_scale,
                                   w->max_abs_bias, base.side != nullptr,
                                   base.side_scale);
  base.wide = w->wide.get();
  base.tap_stride = w->tap_stride;
  base.prepared = w->prepared.get();
  if (w->tap_stride == 0 && GlobalWindow(g)) {
    rows = global_rows != nullptr ? global_rows : DepthwiseGlobalRowsPortable;
  }
  // An identity call (depthwise_identity.h): the geometry's part of it here,
  // the weights' in PreparedWeights (`input` has the output's channels:
  // expanded above when M > 1).
  const bool identity = w->identity_weights && g.pad_top == 0 &&
                        g.pad_bottom == 0 && g.pad_left == 0 && g.pad_right == 0 &&
                        base.side == nullptr;
  if (identity) {
    rows = identity_rows != nullptr ? identity_rows : DepthwiseIdentityRowsPortable;
    g_identity_calls.fetch_add(1, std::memory_order_relaxed);
  }
  const int64_t total_rows = g.batch * g.out_h;
  // Cycles per output row for the vector kernels: per pixel and 16
  // channels about one cycle per tap plus the epilogue (ParallelFor runs
  // small calls inline: waking a second thread costs more than a 7x7 or
  // 14x14 layer at batch 1 takes); an identity call's about one cycle per
  // 64 bytes.
  const int64_t cost = identity ? g.out_w * ((c_count + 63) / 64)
                                : g.out_w * ((c_count + 15) / 16) * (taps + 8);
  const LutBody table = a.output_lut != nullptr ? lut : nullptr;
  const int64_t row_bytes = g.out_w * c_count;
  // Rows in slices: of about kLutSliceBytes of output with an output lookup
  // table, each looked up right after it is written (still in cache), and
  // of about kBandInputBytes of input rows.
  const int64_t lut_rows =
      table != nullptr ? std::max<int64_t>(1, kLutSliceBytes / row_bytes)
                       : total_rows;
  // Input bytes per output row: stride_h input rows of the (expanded) input.
  const int64_t band_rows = std::max<int64_t>(
      1, kBandInputBytes / std::max<int64_t>(1, g.stride_h * g.in_w * c_count));
  const int64_t slice_rows = std::min(lut_rows, band_rows);
  // On several threads the rows go in bands, kBandsPerThread a thread,
  // instead of a row (or total_rows / 16 rows, PoolParallelFor's grain) a
  // unit: a band of rows reads each input row once where row units read it
  // three times (the row kernels keep a 3x3 window's rows in L1 from one
  // output row to the next), and claims fewer units. MobileNetV2's 53 steps
  // as a chain (bench_sequence, two threads, Zen 5 VM, avx512vnni, builds
  // alternated): the sum 0.985x in fast periods of the VM (112x112x32
  // 0.93x, 14x14x576 0.94x) and 0.976x in slow ones (the 14x14 and 7x7
  // depthwise layers 0.88-0.94x); one or three bands a thread measured
  // within 2% of two; avxvnni and avx2 (bound by their multiplies)
  // unchanged, 1.00x. In TF (step profiler, InferenceRunner, the two .so
  // alternated three times): the steps' sum 0.986x, the depthwise steps
  // 0.89-0.95x; whole calls within the VM's noise (11 pairs, +-2%).
  constexpr int64_t kBandsPerThread = 2;
  const int64_t units =
      parallel_for.num_threads > 1
          ? std::min(total_rows, kBandsPerThread * parallel_for.num_threads)
          : total_rows;
  parallel_for(units, cost * ((total_rows + units - 1) / units), [&](int64_t ub, int64_t ue) {
    const int64_t begin = total_rows * ub / units, end = total_rows * ue / units;
    DepthwiseRowArgs d = base;
    for (int64_t r = begin; r < end; r += slice_rows) {
      d.row_begin = r;
      d.row_end = std::min(end, r + slice_rows);
      rows(d);
      if (table != nullptr) {
        table(a.output_lut, a.output + r * row_bytes,
              (d.row_end - r) * row_bytes);
      }
    }
  });
}

}  // namespace cpu
}  // namespace tf_fused_int8
