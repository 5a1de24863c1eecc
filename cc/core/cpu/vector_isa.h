// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The vector instruction set that a CPU kernel path's element-wise bodies
// (FusedInt8Quantize: cc/core/cpu/quantize/, FusedInt8MaxPool:
// cc/core/cpu/pool/) use: the AVX-512 path runs their AVX-512 bodies, the
// AVX2 family (avx2, avx2_direct, avx2_winograd, avxvnni) their AVX2 ones,
// every other path (portable, reference, the aarch64 ones, where the
// compiler's baseline vectorization serves) the baseline loop, and so does a
// path this build or CPU lacks (those ops do not refuse it, unlike the
// convolutions: the baseline gives the same bits).
#ifndef TF_FUSED_INT8_CC_CORE_CPU_VECTOR_ISA_H_
#define TF_FUSED_INT8_CC_CORE_CPU_VECTOR_ISA_H_

#include "cc/core/fused_conv.h"

namespace tf_fused_int8 {
namespace cpu {

enum class VectorIsa { kBaseline, kAvx2, kAvx512 };

inline VectorIsa VectorIsaOf(KernelPath path) {
  if (!KernelPathSupported(path)) return VectorIsa::kBaseline;
#if defined(__x86_64__)
  switch (path) {
    case KernelPath::kAvx512Vnni:
    case KernelPath::kAmx:
      return VectorIsa::kAvx512;
    case KernelPath::kAvx2:
    case KernelPath::kAvx2Direct:
    case KernelPath::kAvx2Winograd:
    case KernelPath::kAvxVnni:
      return VectorIsa::kAvx2;
    default:
      break;
  }
#else
  (void)path;
#endif
  return VectorIsa::kBaseline;
}

// The element-wise body of `path`: `avx512` or `avx2` where VectorIsaOf
// says so, else `baseline`. Name the vector bodies with
// TF_FUSED_INT8_X86_BODY(fn): fn on x86-64, where they exist, and nullptr
// elsewhere (where VectorIsaOf is always kBaseline).
template <typename Body>
Body BodyForPath(KernelPath path, Body baseline, Body avx2, Body avx512) {
  switch (VectorIsaOf(path)) {
    case VectorIsa::kAvx512:
      return avx512;
    case VectorIsa::kAvx2:
      return avx2;
    case VectorIsa::kBaseline:
      break;
  }
  return baseline;
}

#if defined(__x86_64__)
#define TF_FUSED_INT8_X86_BODY(fn) (fn)
#else
#define TF_FUSED_INT8_X86_BODY(fn) nullptr
#endif

// The path an element-wise op follows by default: the convolutions' path
// (TF_FUSED_INT8_CPU_KERNEL, or the best this CPU has); portable when the
// variable forces a path that cannot run here.
inline KernelPath ElementwiseKernelPath() {
  KernelPath path = KernelPath::kPortable;
  if (!ResolveKernelPath(KernelPath::kAuto, &path).empty()) {
    path = KernelPath::kPortable;
  }
  return path;
}

}  // namespace cpu
}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_CPU_VECTOR_ISA_H_
