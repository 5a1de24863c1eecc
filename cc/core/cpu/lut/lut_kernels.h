// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Output lookup tables (FusedConvArgs::output_lut, the op's output_lut):
// data[i] = lut[data[i] + 128] in place, for a table of 256 int8 entries.
// One body per instruction set, each giving exactly what LutBytes gives;
// cc/core/cpu/lut/lut.cc picks one per kernel path and applies it to a
// convolution's output after the kernel wrote it.
#ifndef TF_FUSED_INT8_CC_CORE_CPU_LUT_LUT_KERNELS_H_
#define TF_FUSED_INT8_CC_CORE_CPU_LUT_LUT_KERNELS_H_

#include <cstdint>

namespace tf_fused_int8 {
namespace cpu {

using LutBody = void (*)(const int8_t* lut, int8_t* data, int64_t n);

// Bytes [begin, n) one at a time: the portable body and the vector bodies'
// tails.
inline void LutBytes(const int8_t* lut, int8_t* data, int64_t begin,
                     int64_t n) {
  for (int64_t i = begin; i < n; ++i) data[i] = lut[data[i] + 128];
}

#if defined(__x86_64__)
// VPSHUFB over 16 rows of 16 entries (lut_avx2.cc, lut_avx512vnni.cc).
void LutAvx2(const int8_t* lut, int8_t* data, int64_t n);
void LutAvx512Bw(const int8_t* lut, int8_t* data, int64_t n);
// VPERMI2B over two 128-entry halves: needs AVX512_VBMI (Ice Lake, Zen 4
// and later; not Cascade Lake), see CpuHasAvx512Vbmi.
void LutAvx512Vbmi(const int8_t* lut, int8_t* data, int64_t n);
bool CpuHasAvx512Vbmi();
#endif
#if defined(__aarch64__)
// TBL/TBX over four 64-entry quarters (lut_neon.cc).
void LutNeon(const int8_t* lut, int8_t* data, int64_t n);
#endif

}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_LUT_LUT_KERNELS_H_
