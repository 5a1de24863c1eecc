// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Run-time selection of the CPU kernel: CPU features are probed once; the
// environment variable TF_FUSED_INT8_CPU_KERNEL forces a path (read on every
// call so that tests and benchmarks can switch paths within one process).
//
// Builds for x86-64 contain the avx2 / avxvnni / avx512vnni / amx kernels, builds
// for aarch64 the neon / dotprod / i8mm ones (BUILD selects the files by
// target CPU); the kernel tables are referred to only under the matching
// #if, so this file compiles for either (and for any other CPU, with the
// portable kernel only). Every path name parses everywhere; a path absent
// from the build is "not available", like one the CPU lacks.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>

#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "cc/core/cpu/depthwise/depthwise.h"
#include "cc/core/cpu/grouped/grouped.h"
#include "cc/core/cpu/gemm/gemm_kernels.h"
#include "cc/core/cpu/lut/lut.h"
#include "cc/core/cpu/winograd/winograd.h"
#include "cc/core/fused_conv.h"

namespace tf_fused_int8 {
namespace {

#if defined(__x86_64__)
constexpr bool kX86Kernels = true;
#else
constexpr bool kX86Kernels = false;
#endif
#if defined(__aarch64__)
constexpr bool kArmKernels = true;
#else
constexpr bool kArmKernels = false;
#endif

#if defined(__aarch64__) && defined(__linux__)
// <asm/hwcap.h> values (Linux UAPI, arm64), spelled out so that older
// kernel headers without HWCAP2_I8MM still build.
constexpr unsigned long kHwcapAsimd = 1ul << 1;     // HWCAP_ASIMD
constexpr unsigned long kHwcapAsimdDp = 1ul << 20;  // HWCAP_ASIMDDP
constexpr unsigned long kHwcap2I8mm = 1ul << 13;    // HWCAP2_I8MM
#if defined(HWCAP_ASIMDDP) && defined(HWCAP2_I8MM)
static_assert(kHwcapAsimd == HWCAP_ASIMD && kHwcapAsimdDp == HWCAP_ASIMDDP &&
                  kHwcap2I8mm == HWCAP2_I8MM,
              "arm64 hwcap bits differ from <asm/hwcap.h>");
#endif
#endif

#if defined(__x86_64__) && defined(__linux__)
// AMX-INT8 that this process may use: CPUID.(EAX=7, ECX=0):EDX bit 24
// (AMX-TILE) and bit 25 (AMX-INT8); XCR0 bits 17 and 18 (tile configuration
// and tile data state enabled by the OS); and Linux's permission for this
// process to use the tile data state, which it grants on request
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), Linux 5.16 and
// later; once per process, for every thread). A refusal, or a kernel
// without the request, leaves the path unavailable: `auto` then takes the
// best other path, and forcing `amx` is the usual clean error.
bool AmxUsable() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || ((c >> 27) & 1) == 0) return false;  // OSXSAVE
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  if (((d >> 24) & 1) == 0 || ((d >> 25) & 1) == 0) return false;
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  constexpr unsigned kTileStates = (1u << 17) | (1u << 18);
  if ((xcr0_lo & kTileStates) != kTileStates) return false;
  constexpr long kArchReqXcompPerm = 0x1023;  // <asm/prctl.h>
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}
#endif

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool avxvnni = false;
  bool avx512vnni = false;
  bool amx = false;  // AMX-TILE + AMX-INT8, granted by the OS (AmxUsable)
  bool neon = false;     // Advanced SIMD (ASIMD)
  bool dotprod = false;  // SDOT (FEAT_DotProd)
  bool i8mm = false;     // SMMLA (FEAT_I8MM)
};

[[maybe_unused]] const CpuFeatures& Features() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2");
    f.fma = __builtin_cpu_supports("fma");
#if defined(TF_FUSED_INT8_EMULATED_ISAS)
    // core_test_emulated's build (BUILD): its avxvnni kernels compute
    // VPDPBUSD with AVX2 instructions (avxvnni_dot.h).
    f.avxvnni = f.avx2;
#else
    f.avxvnni = f.avx2 && __builtin_cpu_supports("avxvnni");
#endif
    f.avx512vnni = __builtin_cpu_supports("avx512f") &&
                   __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") &&
                   __builtin_cpu_supports("avx512dq") &&
                   __builtin_cpu_supports("avx512vnni");
#if defined(__x86_64__) && defined(__linux__)
    // The amx path runs everything but its GEMMs on the avx512vnni kernels.
#if defined(TF_FUSED_INT8_EMULATED_ISAS)
    // core_test_emulated's build: its amx kernels run the tile
    // instructions in C++ (amx_tiles.h).
    f.amx = f.avx512vnni;
#else
    f.amx = f.avx512vnni && AmxUsable();
#endif
#endif
#elif defined(__aarch64__) && defined(__linux__)
    // The kernel reports what user space may execute (and qemu-user reports
    // its emulated CPU's features the same way).
    const unsigned long hwcap = getauxval(AT_HWCAP);
    const unsigned long hwcap2 = getauxval(AT_HWCAP2);
    f.neon = (hwcap & kHwcapAsimd) != 0;
    f.dotprod = f.neon && (hwcap & kHwcapAsimdDp) != 0;
    // gemm_i8mm.cc is built with +dotprod as well (every i8mm core has it).
    f.i8mm = f.dotprod && (hwcap2 & kHwcap2I8mm) != 0;
#elif defined(__aarch64__)
    // Advanced SIMD is part of every AArch64 ABI; no portable way to probe
    // the optional extensions here.
    f.neon = true;
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
    {KernelPath::kAmx, "amx"},
    {KernelPath::kNeon, "neon"},
    {KernelPath::kDotprod, "dotprod"},
    {KernelPath::kI8mm, "i8mm"},
};

// "auto, reference, ...": every name above, for error messages.
std::string AllPathNames() {
  std::string names;
  for (const PathName& p : kNames) {
    if (!names.empty()) names += ", ";
    names += p.name;
  }
  return names;
}

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
      return kX86Kernels && Features().avx2 && Features().fma;
    case KernelPath::kAvxVnni:
      return kX86Kernels && Features().avxvnni && Features().fma;
    case KernelPath::kAvx512Vnni:
      return kX86Kernels && Features().avx512vnni && Features().fma;
    case KernelPath::kAmx:
      return kX86Kernels && Features().amx && Features().fma;
    case KernelPath::kNeon:
      return kArmKernels && Features().neon;
    case KernelPath::kDotprod:
      return kArmKernels && Features().dotprod;
    case KernelPath::kI8mm:
      return kArmKernels && Features().i8mm;
  }
  return false;
}

KernelPath BestKernelPath() {
  static const KernelPath best = [] {
    for (KernelPath p : {KernelPath::kAmx, KernelPath::kAvx512Vnni, KernelPath::kAvxVnni,
                         KernelPath::kAvx2, KernelPath::kI8mm,
                         KernelPath::kDotprod, KernelPath::kNeon}) {
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
        return std::string("TF_FUSED_INT8_CPU_KERNEL=") + env +
               " is not one of " + AllPathNames();
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

std::atomic<int64_t> g_non_negative_calls{0};

#if defined(__x86_64__)
// Whether the avx2 and avxvnni GEMMs (and the avx2 3x3 depthwise blocks,
// RunFusedConv) may take their kernels for an input whose every byte is in
// [0, 127] (gemm_avx2.cc, gemm_avxvnni.cc, depthwise_avx2.cc): the
// caller's promise (FusedConvArgs::input_non_negative), or a scan of the
// input that a signed input usually ends within its first 256 bytes (AVX2
// code: both paths' CPUs have it). The avx512vnni GEMM reads the promise
// alone (GemmTileArgs::non_negative): its layers run 2-3x faster than
// avx2's, and there the scan of a non-negative input cost 6-16 us of 60-190
// (bench_core, MobileNetV2's 56x56x144 -> 24, ResNet-50's 56x56x256 -> 64,
// one thread, Xeon with AMX), more than the form saves.
bool NonNegativeInput(const FusedConvArgs& a) {
  const bool non_negative =
      a.input_non_negative ||
      cpu::InputNonNegativeAvx2(a.input, a.geo.InputElements());
  if (non_negative) g_non_negative_calls.fetch_add(1, std::memory_order_relaxed);
  return non_negative;
}

const cpu::IsaKernels& Avx2Gemm(const FusedConvArgs& a) {
  return NonNegativeInput(a) ? cpu::kAvx2NonNegativeKernels : cpu::kAvx2Kernels;
}

const cpu::IsaKernels& AvxVnniGemm(const FusedConvArgs& a) {
  return NonNegativeInput(a) ? cpu::kAvxVnniNonNegativeKernels : cpu::kAvxVnniKernels;
}
#endif

// One groups == 1 call on a resolved, non-reference path; one_group: it is
// one group of a grouped call (RunPerGroup). Returns whether the output
// lookup table (args.output_lut) was applied: the GEMM driver applies it
// to each work item while its outputs are in cache; the others leave it to
// RunFusedConv's pass over the whole output.
bool RunUngrouped(const FusedConvArgs& args, KernelPath path,
                  const ParallelFor& parallel_for, const int8_t* cache_key,
                  [[maybe_unused]] bool one_group) {
  [[maybe_unused]] const cpu::LutBody lut = cpu::LutBodyFor(path);
  switch (path) {
#if defined(__x86_64__)
    case KernelPath::kAvx2:
    case KernelPath::kAvx2Winograd:
      if (cpu::WinogradEligible(args.geo) &&
          (path == KernelPath::kAvx2Winograd ||
           cpu::WinogradPreferredAvx2(args.geo))) {
        cpu::RunWinograd(args, cpu::kWinogradAvx2, parallel_for, cache_key);
        return false;
      }
      cpu::RunGemmConv(args, Avx2Gemm(args), parallel_for, cache_key, lut);
      return true;
    case KernelPath::kAvx2Direct:
      cpu::RunGemmConv(args, Avx2Gemm(args), parallel_for, cache_key, lut);
      return true;
    case KernelPath::kAvxVnni:
      cpu::RunGemmConv(args, AvxVnniGemm(args), parallel_for, cache_key, lut);
      return true;
    case KernelPath::kAvx512Vnni:
      // One group of a grouped call with at most 16 output channels: a
      // 64-channel zmm block would be three quarters padding, a 16-channel
      // ymm VNNI block is full (1.3-1.4x on ResNeXt's 32 x 16 layers).
      if (one_group && args.geo.out_c <= 16 &&
          KernelPathSupported(KernelPath::kAvxVnni)) {
        cpu::RunGemmConv(args, AvxVnniGemm(args), parallel_for, cache_key, lut);
        return true;
      }
      cpu::RunGemmConv(args, cpu::kAvx512VnniKernels, parallel_for, cache_key, lut);
      return true;
    case KernelPath::kAmx:
      // A reduction of at most 16 bytes fills a quarter of a tile row, and
      // the tiles' store and reload costs more than the products save (one
      // Sapphire Rapids-class thread, bench_core: MobileNetV2's 112x112x16
      // -> 96 173-175 us on the avx512vnni kernel, 190-210 on amx; 8 -> 64
      // 25 against 34; 24 -> 144 81 against 72, so K = 24 stays on amx).
      if (args.geo.ReductionDepth() <= 16) {
        cpu::RunGemmConv(args, cpu::kAvx512VnniKernels, parallel_for, cache_key, lut);
        return true;
      }
      cpu::RunGemmConv(args, cpu::kAmxKernels, parallel_for, cache_key, lut);
      return true;
#endif
#if defined(__aarch64__)
    case KernelPath::kNeon:
      cpu::RunGemmConv(args, cpu::kNeonKernels, parallel_for, cache_key, lut);
      return true;
    case KernelPath::kDotprod:
      cpu::RunGemmConv(args, cpu::kDotprodKernels, parallel_for, cache_key, lut);
      return true;
    case KernelPath::kI8mm:
      cpu::RunGemmConv(args, cpu::kI8mmKernels, parallel_for, cache_key, lut);
      return true;
#endif
    default:
      RunPortable(args, parallel_for);
      return false;
  }
}

// A path's depthwise row kernel, the preparation of the weights it reads
// (none for the portable and NEON kernels), its global average pooling's
// and its identity call's row kernels (depthwise.h; nullptr: the portable
// ones).
struct DepthwiseKernel {
  cpu::DepthwiseRowsFn rows;
  const cpu::DepthwisePrep* prep;
  cpu::DepthwiseRowsFn global_rows = nullptr;
  cpu::DepthwiseRowsFn identity_rows = nullptr;
};

DepthwiseKernel DepthwiseKernelFor(KernelPath path, const ConvGeometry& g) {
  (void)g;  // x86 only
  switch (path) {
#if defined(__x86_64__)
    case KernelPath::kAvx2:
    case KernelPath::kAvx2Direct:
    case KernelPath::kAvx2Winograd:
      return {cpu::DepthwiseRowsAvx2, &cpu::kDepthwisePrepAvx2, cpu::DepthwiseGlobalRowsAvx2,
              cpu::DepthwiseIdentityRowsAvx2};
    case KernelPath::kAvxVnni:
      return {cpu::DepthwiseRowsAvxVnni, &cpu::kDepthwisePrepAvxVnni, cpu::DepthwiseGlobalRowsAvx2,
              cpu::DepthwiseIdentityRowsAvx2};
    case KernelPath::kAvx512Vnni:
    case KernelPath::kAmx:  // a depthwise tap has one k per channel: no tiles
      // Where 32-channel ymm blocks beat the zmm ones (a prep of their own:
      // the prepared-weights cache keys on it).
      if (cpu::DepthwiseYmmBlocksAvx512(g)) {
        return {cpu::DepthwiseRowsYmmAvx512Vnni, &cpu::kDepthwisePrepYmmAvx512Vnni,
                cpu::DepthwiseGlobalRowsAvx512, cpu::DepthwiseIdentityRowsAvx512};
      }
      return {cpu::DepthwiseRowsAvx512Vnni, &cpu::kDepthwisePrepAvx512Vnni,
              cpu::DepthwiseGlobalRowsAvx512, cpu::DepthwiseIdentityRowsAvx512};
#endif
#if defined(__aarch64__)
    // SDOT / SMMLA reduce over four / eight consecutive k of one lane; a
    // depthwise tap has one k per channel, so all three paths share the
    // SMLAL row kernel.
    case KernelPath::kNeon:
    case KernelPath::kDotprod:
    case KernelPath::kI8mm:
      return {cpu::DepthwiseRowsNeon, nullptr};
#endif
    default:
      return {cpu::DepthwiseRowsPortable, nullptr};
  }
}

}  // namespace

int64_t NonNegativeInputCallsForTesting() {
  return g_non_negative_calls.load(std::memory_order_relaxed);
}

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
    case KernelPath::kNeon:
    case KernelPath::kDotprod:
    case KernelPath::kI8mm:
    case KernelPath::kAmx:
      break;
    default:
      return std::string("CPU kernel '") + KernelPathName(resolved) +
             "' has no implementation";
  }
  bool lut_applied = false;
  if (args.geo.IsDepthwise()) {
    const DepthwiseKernel dw = DepthwiseKernelFor(resolved, args.geo);
    FusedConvArgs dw_args = args;
#if defined(__x86_64__)
    // The avx2 3x3 blocks run fastest on inputs in [0, 127] (MaddubsDot,
    // three instructions a dot, against SignDot's five on signed bytes:
    // 56x56x144 125-131 against 151 us, 28x28x192 37 against 47, one Zen 4
    // thread; depthwise_avx2.cc): an input not known to be is scanned, as
    // for the avx2 GEMM. bench_core,
    // one Zen 4 thread, a non-negative input not told against told, two
    // rounds: 112x112x32 106-112 / 96-97 us, 56x56x144 135-142 / 132-145,
    // 14x14x576 36-42 / 31-33, 7x7x960 16-22 / 17 (the blocks take 0.4-0.7x
    // the time of the 16-channel kernel: depthwise_avx2.cc).
    if (dw.rows == cpu::DepthwiseRowsAvx2 && !args.input_non_negative &&
        cpu::DepthwiseAvx2TakesNonNegative(args.geo)) {
      dw_args.input_non_negative = NonNegativeInput(args);
    }
#endif
    cpu::RunDepthwise(dw_args, dw.rows, parallel_for, dw.prep, cpu::LutBodyFor(resolved),
                      dw.global_rows, dw.identity_rows);
    lut_applied = true;
#if defined(__x86_64__)
  } else if ((resolved == KernelPath::kAvx512Vnni || resolved == KernelPath::kAmx) &&
             cpu::NarrowGroupsFit(args.geo)) {
    cpu::RunNarrowGroups(args, cpu::NarrowGroupRowsAvx512Vnni, parallel_for);
#endif
  } else if (args.geo.groups > 1) {
    cpu::RunPerGroup(args, parallel_for,
                     [&](const FusedConvArgs& sub, const int8_t* cache_key,
                         const ParallelFor& inner) {
                       // The groups write copies: the table comes after.
                       FusedConvArgs plain = sub;
                       plain.output_lut = nullptr;
                       RunUngrouped(plain, resolved, inner, cache_key,
                                    /*one_group=*/true);
                     });
  } else {
    lut_applied = RunUngrouped(args, resolved, parallel_for, nullptr,
                               /*one_group=*/false);
  }
  if (args.output_lut != nullptr && !lut_applied) {
    cpu::ApplyLut(args.output_lut, args.output, args.geo.OutputElements(),
                  resolved, parallel_for);
  }
  return "";
}

}  // namespace tf_fused_int8
