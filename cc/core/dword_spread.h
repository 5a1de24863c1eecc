// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The PSHUFB control that spreads the j-th quarter of each 128-bit lane over
// the lane's four dwords: byte 4j + i of the lane goes to byte `at` of dword
// i, the dword's other bytes become zero (index 0x80). With at = 3 and an
// arithmetic shift right by 24 it sign-extends 4 bytes to int32 (the side
// input of the interleaved-order epilogues: epilogue_avx512.h, and
// depthwise_avxvnni.cc's Epilogue32); with at = 0 it zero-extends them (the
// 3x3 depthwise kernels' stride-2 E column). Plain C++, no intrinsics: the
// callers load the bytes into their own vector width.
#ifndef TF_FUSED_INT8_CC_CORE_DWORD_SPREAD_H_
#define TF_FUSED_INT8_CC_CORE_DWORD_SPREAD_H_

#include <cstdint>

namespace tf_fused_int8 {
namespace {

// Writes 16 * lanes control bytes (lanes 128-bit lanes: 2 for ymm, 4 for zmm).
inline void DwordSpreadShuffle(int j, int at, int lanes, int8_t* idx) {
  for (int lane = 0; lane < lanes; ++lane) {
    for (int i = 0; i < 4; ++i) {
      int8_t* d = idx + 16 * lane + 4 * i;
      for (int b = 0; b < 4; ++b) {
        d[b] = b == at ? static_cast<int8_t>(4 * j + i) : static_cast<int8_t>(0x80);
      }
    }
  }
}

}  // namespace
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_DWORD_SPREAD_H_
