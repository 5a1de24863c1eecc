// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Public entry points of the TF-free compute core.
#ifndef TF_FUSED_INT8_CC_CORE_FUSED_CONV_H_
#define TF_FUSED_INT8_CC_CORE_FUSED_CONV_H_

#include <string>

#include "cc/core/conv_params.h"

namespace tf_fused_int8 {

// The CPU kernel implementations. kAuto picks the fastest one this CPU runs,
// unless the environment variable TF_FUSED_INT8_CPU_KERNEL names another
// (reference, portable, avx2, avx2_direct, avx2_winograd, avxvnni,
// avx512vnni, neon, dotprod, i8mm); it is read on every call so that tests
// and benchmarks can force each path in turn. Every name parses on every
// build; the x86-64 paths exist only in x86-64 builds and the aarch64 ones
// (neon, dotprod, i8mm) only in aarch64 builds, and forcing one that is
// absent or that this CPU lacks is a clean error (ResolveKernelPath).
//
// avx2 chooses per call between the direct kernels and the exact Winograd
// F(2x2, 3x3) (cpu/winograd/winograd.h) where that was measured faster;
// avx2_direct never uses Winograd; avx2_winograd uses it on every eligible
// convolution (3x3, stride 1, dilation 1; grouped calls per group) and the
// direct kernels on all others, so that tests can force each variant.
enum class KernelPath {
  kAuto,
  kReference,
  kPortable,
  kAvx2,
  kAvx2Direct,
  kAvx2Winograd,
  kAvxVnni,
  kAvx512Vnni,
  kNeon,     // AArch64 Advanced SIMD (SMULL + SADALP), every ARMv8-A CPU
  kDotprod,  // ARMv8.2 dot product (SDOT), HWCAP_ASIMDDP
  kI8mm,     // int8 matrix multiply (SMMLA), HWCAP2_I8MM (with dot product)
  kAmx,      // Intel AMX-INT8 (TDPBSSD) GEMMs; everything else as kAvx512Vnni
};

const char* KernelPathName(KernelPath path);
// Parses a name as accepted by TF_FUSED_INT8_CPU_KERNEL ("auto" included).
bool ParseKernelPath(const std::string& name, KernelPath* path);
// Whether this build has the path and this CPU can run it.
bool KernelPathSupported(KernelPath path);
// The fastest supported path (CPU features are probed once).
KernelPath BestKernelPath();
// Resolves kAuto through the environment variable and BestKernelPath().
// Returns an error message for an unknown or unsupported forced path.
std::string ResolveKernelPath(KernelPath requested, KernelPath* resolved);

// Runs the fused convolution. args.geo must have been filled in by
// ComputeGeometry and every pointer must cover its tensor. Returns an empty
// string on success or an error message (nothing is written then).
std::string RunFusedConv(const FusedConvArgs& args, KernelPath path,
                         const ParallelFor& parallel_for);

// The individual kernels (no path resolution, no validation).
// reference.cc: obvious, slow, exact; the one every other path is tested
// against.
void RunReference(const FusedConvArgs& args);
// cpu/conv_portable.cc: blocked im2col + int32 GEMM in plain C++ (groups == 1
// only: RunFusedConv sends grouped calls through cpu/grouped.h and depthwise
// calls to cpu/depthwise.h first).
void RunPortable(const FusedConvArgs& args, const ParallelFor& parallel_for);

// Tests only: how many avx2 and avxvnni GEMM calls so far took the kernels
// for inputs in [0, 127] (kAvx2NonNegativeKernels, kAvxVnniNonNegativeKernels;
// dispatch.cc).
int64_t NonNegativeInputCallsForTesting();

}  // namespace tf_fused_int8

#endif  // TF_FUSED_INT8_CC_CORE_FUSED_CONV_H_
