// Copyright tf-fused-int8 authors. Apache 2.0.
//
// WithStaticCount<kMax>(n, f): calls f(std::integral_constant<int, m>{})
// with m = n for a runtime n in [1, kMax] (below 1: 1; above kMax: kMax),
// so that a kernel's register-blocked loop over m vectors (accumulators
// held in registers) gets m as a template argument. Plain C++, no
// instruction-set code: included by baseline and ISA translation units
// alike (the global average's channel sums, depthwise_avx2.cc and
// depthwise_avx512vnni.cc).
#ifndef TF_FUSED_INT8_CC_CORE_CPU_STATIC_COUNT_H_
#define TF_FUSED_INT8_CC_CORE_CPU_STATIC_COUNT_H_

#include <cstdint>
#include <type_traits>

namespace tf_fused_int8 {
namespace cpu {

template <int kMax, typename F>
inline void WithStaticCount(int64_t n, const F& f) {
  static_assert(kMax >= 1, "WithStaticCount needs kMax >= 1");
  if constexpr (kMax > 1) {
    if (n < kMax) {
      WithStaticCount<kMax - 1>(n, f);
      return;
    }
  }
  f(std::integral_constant<int, kMax>{});
}

}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_STATIC_COUNT_H_
