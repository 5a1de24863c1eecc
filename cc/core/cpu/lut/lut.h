// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The output lookup table of a convolution (FusedConvArgs::output_lut),
// applied in place to the output the kernel wrote: out = lut[out + 128].
#ifndef TF_FUSED_INT8_CC_CORE_CPU_LUT_LUT_H_
#define TF_FUSED_INT8_CC_CORE_CPU_LUT_LUT_H_

#include <cstdint>

#include "cc/core/cpu/lut/lut_kernels.h"
#include "cc/core/fused_conv.h"

namespace tf_fused_int8 {
namespace cpu {

// The body a kernel path uses (its vector instruction set; VPERMI2B on
// AVX-512 CPUs with VBMI).
LutBody LutBodyFor(KernelPath path);

// Applies lut to n bytes at data, split across parallel_for in slices of
// whole cache lines.
void ApplyLut(const int8_t* lut, int8_t* data, int64_t n, KernelPath path,
              const ParallelFor& parallel_for);

}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_LUT_LUT_H_
