// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Run-time selection of the CPU kernel: CPU features are probed once; the
// environment variable TF_FUSED_INT8_CPU_KERNEL forces a path (read on every
// call so that tests and benchmarks can switch paths within one process).
#include <cstdlib>
#include <string>

#include "cc/core/cpu/depthwise/depthwise.h"
#include "cc/core/cpu/grouped/grouped.h"
#include "cc/core/cpu/gemm/gemm_kernels.h"
#include "cc/core/cpu/winograd/winograd.h"
#include "cc/core/fused_conv.h"

namespace tf_fused_int8 {
namespace {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool avxvnni = false;
  bool avx512vnni = false;
};

[[maybe_unused]] const CpuFeatures& Features() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2");
    f.fma = __builtin_cpu_supports("fma");
    f.avxvnni = f.avx2 && __builtin_cpu_supports("avxvnni");
    f.avx512vnni = __builtin_cpu_supports("avx512f") &&
                   __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") &&
                   __builtin_cpu_supports("avx512dq") &&
                   __builtin_cpu_supports("avx512vnni");
#endif
    return f;
  }();
  return features;
}

struct PathName {
  KernelPath path;
  const char* name;
};
constexpr PathName kNames[] = {
    {KernelPath::kAuto, "auto"},
    {KernelPath::kReference, "reference"},
    {KernelPath::kPortable, "portable"},
    {KernelPath::kAvx2, "avx2"},
    {KernelPath::kAvx2Direct, "avx2_direct"},
    {KernelPath::kAvx2Winograd, "avx2_winograd"},
    {KernelPath::kAvxVnni, "avxvnni"},
    {KernelPath::kAvx512Vnni, "avx512vnni"},
};

}  // namespace

const char* KernelPathName(KernelPath path) {
  for (const PathName& p : kNames) {
    if (p.path == path) return p.name;
  }
  return "unknown";
}

bool ParseKernelPath(const std::string& name, KernelPath* path) {
  for (const PathName& p : kNames) {
    if (name == p.name) {
      *path = p.path;
      return true;
    }
  }
  return false;
}

bool KernelPathSupported(KernelPath path) {
  switch (path) {
    case KernelPath::kAuto:
    case KernelPath::kReference:
    case KernelPath::kPortable:
      return true;
    case KernelPath::kAvx2:
    case KernelPath::kAvx2Direct:
    case KernelPath::kAvx2Winograd:
      return Features().avx2 && Features().fma;
    case KernelPath::kAvxVnni:
      return Features().avxvnni && Features().fma;
    case KernelPath::kAvx512Vnni:
      return Features().avx512vnni && Features().fma;
  }
  return false;
}

KernelPath BestKernelPath() {
  static const KernelPath best = [] {
    for (KernelPath p : {KernelPath::kAvx512Vnni, KernelPath::kAvxVnni,
                         KernelPath::kAvx2}) {
      if (KernelPathSupported(p)) return p;
    }
    return KernelPath::kPortable;
  }();
  return best;
}

std::string ResolveKernelPath(KernelPath requested, KernelPath* resolved) {
  KernelPath path = requested;
  if (path == KernelPath::kAuto) {
    const char* env = std::getenv("TF_FUSED_INT8_CPU_KERNEL");
    if (env != nullptr && env[0] != '\0') {
      if (!ParseKernelPath(env, &path)) {
        std::string names;
        for (const PathName& p : kNames) {
          names += std::string(names.empty() ? "" : ", ") + p.name;
        }
        return std::string("TF_FUSED_INT8_CPU_KERNEL=") + env +
               " is not one of " + names;
      }
    }
  }
  if (path == KernelPath::kAuto) path = BestKernelPath();
  if (!KernelPathSupported(path)) {
    return std::string("CPU kernel '") + KernelPathName(path) +
           "' is not available on this CPU or in this build (best available: " +
           KernelPathName(BestKernelPath()) + ")";
  }
  *resolved = path;
  return "";
}

namespace {

// One groups == 1 call on a resolved, non-reference path; one_group: it is
// one group of a grouped call (RunPerGroup).
void RunUngrouped(const FusedConvArgs& args, KernelPath path,
                  const ParallelFor& parallel_for, const int8_t* cache_key,
                  bool one_group) {
  switch (path) {
    case KernelPath::kAvx2:
    case KernelPath::kAvx2Winograd:
      if (cpu::WinogradEligible(args.geo) &&
          (path == KernelPath::kAvx2Winograd ||
           cpu::WinogradPreferredAvx2(args.geo))) {
        cpu::RunWinograd(args, cpu::kWinogradAvx2, parallel_for, cache_key);
        return;
      }
      cpu::RunGemmConv(args, cpu::kAvx2Kernels, parallel_for, cache_key);
      return;
    case KernelPath::kAvx2Direct:
      cpu::RunGemmConv(args, cpu::kAvx2Kernels, parallel_for, cache_key);
      return;
    case KernelPath::kAvxVnni:
      cpu::RunGemmConv(args, cpu::kAvxVnniKernels, parallel_for, cache_key);
      return;
    case KernelPath::kAvx512Vnni:
      // One group of a grouped call with at most 16 output channels: a
      // 64-channel zmm block would be three quarters padding, a 16-channel
      // ymm VNNI block is full (1.3-1.4x on ResNeXt's 32 x 16 layers).
      if (one_group && args.geo.out_c <= 16 &&
          KernelPathSupported(KernelPath::kAvxVnni)) {
        cpu::RunGemmConv(args, cpu::kAvxVnniKernels, parallel_for, cache_key);
        return;
      }
      cpu::RunGemmConv(args, cpu::kAvx512VnniKernels, parallel_for, cache_key);
      return;
    default:
      RunPortable(args, parallel_for);
      return;
  }
}

cpu::DepthwiseRowsFn DepthwiseRows(KernelPath path) {
  switch (path) {
    case KernelPath::kAvx2:
    case KernelPath::kAvx2Direct:
    case KernelPath::kAvx2Winograd:
    case KernelPath::kAvxVnni:
      return cpu::DepthwiseRowsAvx2;
    case KernelPath::kAvx512Vnni:
      return cpu::DepthwiseRowsAvx512Vnni;
    default:
      return cpu::DepthwiseRowsPortable;
  }
}

}  // namespace

std::string RunFusedConv(const FusedConvArgs& args, KernelPath path,
                         const ParallelFor& parallel_for) {
  KernelPath resolved;
  std::string err = ResolveKernelPath(path, &resolved);
  if (!err.empty()) return err;
  if (args.geo.OutputElements() == 0) return "";
  switch (resolved) {
    case KernelPath::kReference:
      RunReference(args);
      return "";
    case KernelPath::kPortable:
    case KernelPath::kAvx2:
    case KernelPath::kAvx2Direct:
    case KernelPath::kAvx2Winograd:
    case KernelPath::kAvxVnni:
    case KernelPath::kAvx512Vnni:
      break;
    default:
      return std::string("CPU kernel '") + KernelPathName(resolved) +
             "' has no implementation";
  }
  if (args.geo.IsDepthwise()) {
    cpu::RunDepthwise(args, DepthwiseRows(resolved), parallel_for);
  } else if (resolved == KernelPath::kAvx512Vnni && cpu::NarrowGroupsFit(args.geo)) {
    cpu::RunNarrowGroups(args, cpu::NarrowGroupRowsAvx512Vnni, parallel_for);
  } else if (args.geo.groups > 1) {
    cpu::RunPerGroup(args, parallel_for,
                     [&](const FusedConvArgs& sub, const int8_t* cache_key,
                         const ParallelFor& inner) {
                       RunUngrouped(sub, resolved, inner, cache_key,
                                    /*one_group=*/true);
                     });
  } else {
    RunUngrouped(args, resolved, parallel_for, nullptr, /*one_group=*/false);
  }
  return "";
}

}  // namespace tf_fused_int8
