// Copyright tf-fused-int8 authors. Apache 2.0.
#include "cc/core/quantize.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cc/core/cpu/quantize/preprocess_loop.h"
#include "cc/core/cpu/quantize/quantize_kernels.h"
#include "cc/core/cpu/round_int8.h"
#include "cc/core/cpu/vector_isa.h"
#include "cc/core/fused_conv.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace tf_fused_int8 {
namespace {

// One element, portably (the tail, and every element on CPUs without SSE2).
inline int8_t QuantizeOne(float x, float scale) {
  return cpu::RoundClipToInt8(x / scale);
}

using VectorBody = int64_t (*)(const float*, int64_t, float, float, int8_t*);

// The vector body of a CPU path (cc/core/cpu/quantize/), or null for the
// SSE2 / portable loop below. All give the same bits.
VectorBody BodyFor(KernelPath path) {
  return cpu::BodyForPath<VectorBody>(path, nullptr,
                                      TF_FUSED_INT8_X86_BODY(cpu::QuantizeAvx2),
                                      TF_FUSED_INT8_X86_BODY(cpu::QuantizeAvx512));
}

void QuantizeRange(VectorBody body, const float* x, int64_t n, float scale,
                   int8_t* q) {
  // The reciprocal is taken here, in the thread that runs the range: it
  // depends on that thread's MXCSR rounding mode.
  int64_t i = body != nullptr ? body(x, n, scale, cpu::QuantizeReciprocal(scale), q) : 0;
#if defined(__SSE2__)
  // SSE2 is the x86-64 baseline: 16 elements per step. NaN lanes are zeroed
  // first (CMPORDPS mask), then clipped (MAXPS/MINPS never see a NaN), and
  // CVTPS2DQ rounds in MXCSR's mode, round to nearest even by default (the
  // mode TF's own float ops run in); the packs cannot saturate any more.
  const __m128 s = _mm_set1_ps(scale);
  const __m128 lo = _mm_set1_ps(-128.0f), hi = _mm_set1_ps(127.0f);
  auto four = [&](const float* p) {
    __m128 v = _mm_div_ps(_mm_loadu_ps(p), s);
    v = _mm_and_ps(v, _mm_cmpord_ps(v, v));
    v = _mm_min_ps(_mm_max_ps(v, lo), hi);
    return _mm_cvtps_epi32(v);
  };
  for (; i + 16 <= n; i += 16) {
    const __m128i a = _mm_packs_epi32(four(x + i), four(x + i + 4));
    const __m128i b = _mm_packs_epi32(four(x + i + 8), four(x + i + 12));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), _mm_packs_epi16(a, b));
  }
#endif
  for (; i < n; ++i) q[i] = QuantizeOne(x[i], scale);
}

// Elements per unit of work: 32 KiB of floats.
constexpr int64_t kUnit = 8192;

// The cost (cycles) of one unit with a body: about one cycle per element
// for the SSE2 loop (DIVPS on 4 lanes), half that for AVX2 and a quarter
// for AVX-512 (1x224x224x3 on one Zen 4 thread: 71, 40 and 29 us; the wider
// bodies are partly bound by memory). So a batch-1 image (150528 elements,
// ~38000 cycles with AVX-512) runs inline, below the pool's threshold:
// split over 2 threads it took 35-37 us (Zen 4) and 46 us (Zen 5) against
// 29 and 26 us on one. Those were division bodies; multiplying by the
// reciprocal (quantize_kernels.h), the same image on one thread of the Xeon
// with AMX (KVM), the bodies alone, best of 200: AVX-512 29.5 -> 14.8 us,
// AVX2 28.4 -> 22.7 us; the costs here still hold within 1.3x.
int64_t UnitCost(VectorBody body) {
#if defined(__x86_64__)
  if (body == cpu::QuantizeAvx512) return kUnit / 4;
  if (body == cpu::QuantizeAvx2) return kUnit / 2;
#endif
  (void)body;
  return kUnit;
}

}  // namespace

namespace cpu {

float QuantizeReciprocal(float scale) {
#if defined(__SSE2__)
  if ((_mm_getcsr() & 0x6000u) != 0) return 0.0f;  // not round-to-nearest
#endif
  const float recip = 1.0f / scale;
  constexpr float kMin = std::numeric_limits<float>::min();
  constexpr float kMax = std::numeric_limits<float>::max();
  if (!(scale >= kMin && scale <= kMax && recip >= kMin && recip <= kMax)) {
    return 0.0f;
  }
  return recip;
}

}  // namespace cpu

bool ValidQuantizeScale(float scale) {
  return std::isfinite(scale) && scale > 0.0f;
}

void QuantizeFloatToInt8(const float* x, int64_t n, float scale, int8_t* q,
                         const ParallelFor& parallel_for) {
  // A forced path this CPU lacks, which the convolutions reject, runs the
  // baseline loop here (the same bits).
  const KernelPath path = cpu::ElementwiseKernelPath();
  QuantizeFloatToInt8(x, n, scale, q, parallel_for, path);
}

void QuantizeFloatToInt8(const float* x, int64_t n, float scale, int8_t* q,
                         const ParallelFor& parallel_for, KernelPath path) {
  if (n <= 0) return;
  const VectorBody body = BodyFor(path);
  const int64_t units = (n + kUnit - 1) / kUnit;
  parallel_for(units, UnitCost(body), [&](int64_t begin, int64_t end) {
    const int64_t b = begin * kUnit;
    const int64_t e = std::min(n, end * kUnit);
    QuantizeRange(body, x + b, e - b, scale, q + b);
  });
}

namespace {

inline float ApplyStep(PreprocessOp op, float x, float v) {
  switch (op) {
    case PreprocessOp::kMul:
      return x * v;
    case PreprocessOp::kAdd:
      return x + v;
    case PreprocessOp::kSub:
      return x - v;
    case PreprocessOp::kDiv:
      return x / v;
  }
  return x;
}

// Elements per block: a whole number of channels, about 1024 (4 KiB of
// floats, in L1 between the steps and the quantization).
int64_t BlockElements(int64_t channels) {
  return channels * std::max<int64_t>(1, (1024 + channels - 1) / channels);
}

}  // namespace

void PreprocessQuantizeFloatToInt8(const float* x, int64_t n, int64_t channels,
                                   const PreprocessStep* steps, int64_t num_steps,
                                   float scale, int8_t* q,
                                   const ParallelFor& parallel_for) {
  PreprocessQuantizeFloatToInt8(x, n, channels, steps, num_steps, scale, q,
                                parallel_for, cpu::ElementwiseKernelPath());
}

void PreprocessQuantizeFloatToInt8(const float* x, int64_t n, int64_t channels,
                                   const PreprocessStep* steps, int64_t num_steps,
                                   float scale, int8_t* q,
                                   const ParallelFor& parallel_for, KernelPath path) {
  if (n <= 0) return;
  if (channels < 1) channels = 1;
  const VectorBody body = BodyFor(path);
  using StepBody = void (*)(PreprocessOp, const float*, float, float*, int64_t);
  const StepBody step_body = cpu::BodyForPath<StepBody>(
      path, cpu::PreprocessStepLoop, TF_FUSED_INT8_X86_BODY(cpu::PreprocessStepAvx2),
      TF_FUSED_INT8_X86_BODY(cpu::PreprocessStepAvx512));
  const int64_t block = BlockElements(channels);
  // Per-channel values tiled over one block (the blocks start at channel 0).
  std::vector<std::vector<float>> tiles(num_steps);
  for (int64_t s = 0; s < num_steps; ++s) {
    if (steps[s].count == 1) continue;
    tiles[s].resize(block);
    for (int64_t i = 0; i < block; ++i) tiles[s][i] = steps[s].values[i % channels];
  }
  // Work units of whole blocks, about kUnit elements; a unit costs about
  // twice a plain quantization's (the steps run on the L1-resident block).
  const int64_t per_unit = std::max<int64_t>(1, kUnit / block);
  const int64_t unit = per_unit * block;
  const int64_t units = (n + unit - 1) / unit;
  parallel_for(units, 2 * UnitCost(body) * unit / kUnit + 1,
               [&](int64_t begin, int64_t end) {
    std::vector<float> buf(block);
    for (int64_t b = begin * unit; b < std::min(n, end * unit); b += block) {
      const int64_t len = std::min(block, n - b);
      std::copy(x + b, x + b + len, buf.data());
      for (int64_t s = 0; s < num_steps; ++s) {
        step_body(steps[s].op, tiles[s].empty() ? nullptr : tiles[s].data(),
                  steps[s].values[0], buf.data(), len);
      }
      QuantizeRange(body, buf.data(), len, scale, q + b);
    }
  });
}

int8_t PreprocessQuantizeOneReference(float x, int64_t channel,
                                      const PreprocessStep* steps, int64_t num_steps,
                                      float scale) {
  for (int64_t s = 0; s < num_steps; ++s) {
    x = ApplyStep(steps[s].op, x, steps[s].values[steps[s].count == 1 ? 0 : channel]);
  }
  return QuantizeOneReference(x, scale);
}

int8_t QuantizeOneReference(float x, float scale) {
  const float v = x / scale;
  if (std::isnan(v)) return 0;
  const float r = std::nearbyint(v);  // half to even in the default mode
  return static_cast<int8_t>(std::max(-128.0f, std::min(127.0f, r)));
}

}  // namespace tf_fused_int8
