// Copyright tf-fused-int8 authors. Apache 2.0.
#include "cc/core/channel_scale.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "cc/core/cpu/channel_scale/channel_scale_kernels.h"
#include "cc/core/cpu/vector_isa.h"

namespace tf_fused_int8 {
namespace {

void PortableBody(const int8_t* x, int64_t pixels, int64_t channels,
                  const float* m, bool /*plain*/, int8_t* out) {
  for (int64_t p = 0; p < pixels; ++p) {
    for (int64_t c = 0; c < channels; ++c) {
      out[p * channels + c] = cpu::ChannelScaleOne(x[p * channels + c], m[c]);
    }
  }
}

// Bytes per unit of work.
constexpr int64_t kUnitBytes = 16 << 10;

}  // namespace

void RunChannelScale(const ChannelScaleArgs& a, const ParallelFor& parallel_for) {
  RunChannelScale(a, parallel_for, cpu::ElementwiseKernelPath());
}

void RunChannelScale(const ChannelScaleArgs& a, const ParallelFor& parallel_for,
                     KernelPath path) {
  if (a.batch <= 0 || a.pixels <= 0 || a.channels <= 0) return;
  const cpu::ChannelScaleBody body = cpu::BodyForPath<cpu::ChannelScaleBody>(
      path, PortableBody, TF_FUSED_INT8_X86_BODY(cpu::ChannelScaleAvx2),
      TF_FUSED_INT8_X86_BODY(cpu::ChannelScaleAvx512));
  // Units of whole pixels of one image (each unit reads one row of m).
  const int64_t per_unit = std::max<int64_t>(1, kUnitBytes / a.channels);
  const int64_t units_per_image = (a.pixels + per_unit - 1) / per_unit;
  std::vector<char> plain(static_cast<size_t>(a.batch));
  for (int64_t n = 0; n < a.batch; ++n) {
    plain[n] = cpu::PlainMultipliers(a.m + n * a.channels, a.channels);
  }
  parallel_for(a.batch * units_per_image, kUnitBytes,
               [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t n = u / units_per_image;
      const int64_t p0 = (u % units_per_image) * per_unit;
      const int64_t p1 = std::min(a.pixels, p0 + per_unit);
      const int64_t off = (n * a.pixels + p0) * a.channels;
      body(a.x + off, p1 - p0, a.channels, a.m + n * a.channels, plain[n] != 0,
           a.out + off);
    }
  });
}

int8_t ChannelScaleOneReference(int8_t x, float m) {
  const float v = static_cast<float>(x) * m;
  if (std::isnan(v)) return 0;
  const float r = std::nearbyint(std::max(-128.0f, std::min(127.0f, v)));
  return static_cast<int8_t>(r);
}

}  // namespace tf_fused_int8
