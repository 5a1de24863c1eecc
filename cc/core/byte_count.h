// Copyright tf-fused-int8 authors. Apache 2.0.
//
// WithByteCount(count, f): f(std::integral_constant<int, count>{}) for a
// runtime count in 1..15 (0 for any other count), through one switch (a jump
// table): the partial-vector loads and stores of epilogue_avx2.h and
// epilogue_neon.h (LoadBytes16 / Store16, LoadBytesNeon16 /
// StoreBytesNeon16) take their piece offsets from it as constants. Always
// inlined, as are the callers' lambdas: without that, GCC left the partial
// loads of an 11-channel max pooling's loop as calls (113x113x11 / 2 at
// batch 8, avx2, one Zen 4 thread: 124 -> 179-185 us; inlined 135-136, one
// switch per partial move where each function had its own before). Plain
// C++, included by every instruction set's headers.
#ifndef TF_FUSED_INT8_CC_CORE_BYTE_COUNT_H_
#define TF_FUSED_INT8_CC_CORE_BYTE_COUNT_H_

#include <type_traits>

namespace tf_fused_int8 {

template <typename F>
__attribute__((always_inline)) inline auto WithByteCount(int count, const F& f) {
  switch (count) {
#define TF_FUSED_INT8_BYTE_COUNT_CASE(n) \
  case n:                                \
    return f(std::integral_constant<int, n>{});
    TF_FUSED_INT8_BYTE_COUNT_CASE(1)
    TF_FUSED_INT8_BYTE_COUNT_CASE(2)
    TF_FUSED_INT8_BYTE_COUNT_CASE(3)
    TF_FUSED_INT8_BYTE_COUNT_CASE(4)
    TF_FUSED_INT8_BYTE_COUNT_CASE(5)
    TF_FUSED_INT8_BYTE_COUNT_CASE(6)
    TF_FUSED_INT8_BYTE_COUNT_CASE(7)
    TF_FUSED_INT8_BYTE_COUNT_CASE(8)
    TF_FUSED_INT8_BYTE_COUNT_CASE(9)
    TF_FUSED_INT8_BYTE_COUNT_CASE(10)
    TF_FUSED_INT8_BYTE_COUNT_CASE(11)
    TF_FUSED_INT8_BYTE_COUNT_CASE(12)
    TF_FUSED_INT8_BYTE_COUNT_CASE(13)
    TF_FUSED_INT8_BYTE_COUNT_CASE(14)
    TF_FUSED_INT8_BYTE_COUNT_CASE(15)
#undef TF_FUSED_INT8_BYTE_COUNT_CASE
    default:
      return f(std::integral_constant<int, 0>{});
  }
}

}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_BYTE_COUNT_H_
