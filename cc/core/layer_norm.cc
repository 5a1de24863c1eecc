// Copyright tf-fused-int8 authors. Apache 2.0.
#include "cc/core/layer_norm.h"

#include <algorithm>
#include <cmath>

#include "cc/core/cpu/layer_norm/layer_norm_kernels.h"
#include "cc/core/cpu/vector_isa.h"

namespace tf_fused_int8 {
namespace {

void PortableBody(const int8_t* x, int64_t rows, int64_t channels,
                  const float* gamma, const float* beta, float epsilon,
                  int8_t* out) {
  for (int64_t row = 0; row < rows; ++row) {
    const int8_t* xr = x + row * channels;
    int32_t s1 = 0, s2 = 0;
    for (int64_t c = 0; c < channels; ++c) {
      s1 += xr[c];
      s2 += static_cast<int32_t>(xr[c]) * xr[c];
    }
    const float r = LayerNormRowFactor(s1, s2, channels, epsilon);
    const int32_t cn = static_cast<int32_t>(channels);
    for (int64_t c = 0; c < channels; ++c) {
      out[row * channels + c] = cpu::LayerNormOne(cn * xr[c] - s1, r, gamma[c], beta[c]);
    }
  }
}

// Bytes per unit of work (whole rows).
constexpr int64_t kUnitBytes = 16 << 10;

}  // namespace

float LayerNormRowFactor(int64_t s1, int64_t s2, int64_t channels, float epsilon) {
  const int64_t d = channels * s2 - s1 * s1;
  if (d == 0) return 0.0f;
  const double c = static_cast<double>(channels);
  const double inner = static_cast<double>(d) + static_cast<double>(epsilon) * (c * c);
  return static_cast<float>(1.0 / std::sqrt(inner));
}

void RunLayerNorm(const LayerNormArgs& a, const ParallelFor& parallel_for) {
  RunLayerNorm(a, parallel_for, cpu::ElementwiseKernelPath());
}

void RunLayerNorm(const LayerNormArgs& a, const ParallelFor& parallel_for,
                  KernelPath path) {
  if (a.rows <= 0 || a.channels <= 0) return;
  const cpu::LayerNormBody body = cpu::BodyForPath<cpu::LayerNormBody>(
      path, PortableBody, TF_FUSED_INT8_X86_BODY(cpu::LayerNormAvx2),
      TF_FUSED_INT8_X86_BODY(cpu::LayerNormAvx512));
  const int64_t per_unit = std::max<int64_t>(1, kUnitBytes / a.channels);
  const int64_t units = (a.rows + per_unit - 1) / per_unit;
  // About 3 cycles a byte (sums, then the normalization).
  parallel_for(units, 3 * per_unit * a.channels, [&](int64_t begin, int64_t end) {
    const int64_t r0 = begin * per_unit;
    const int64_t r1 = std::min(a.rows, end * per_unit);
    body(a.x + r0 * a.channels, r1 - r0, a.channels, a.gamma, a.beta, a.epsilon,
         a.out + r0 * a.channels);
  });
}

void LayerNormRowReference(const int8_t* x, int64_t channels, const float* gamma,
                           const float* beta, float epsilon, int8_t* out) {
  int64_t s1 = 0, s2 = 0;
  for (int64_t c = 0; c < channels; ++c) {
    s1 += x[c];
    s2 += static_cast<int64_t>(x[c]) * x[c];
  }
  const float r = LayerNormRowFactor(s1, s2, channels, epsilon);
  for (int64_t c = 0; c < channels; ++c) {
    const float t = static_cast<float>(channels * x[c] - s1);
    const float y = std::fma(t * r, gamma[c], beta[c]);
    if (std::isnan(y)) {
      out[c] = 0;
      continue;
    }
    out[c] = static_cast<int8_t>(std::nearbyint(std::max(-128.0f, std::min(127.0f, y))));
  }
}

}  // namespace tf_fused_int8
