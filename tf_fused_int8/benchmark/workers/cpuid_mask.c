/* cpuid_mask.c: show a benchmark peer a CPU with fewer int8 instructions than this one.
 *
 * The benchmark's --peer_isa=avx2 / avxvnni / avx512vnni preloads this library (LD_PRELOAD) into every
 * peer's worker process with TF_FUSED_INT8_CPUID_MASK set to that name. Its constructor makes
 * the CPUID instruction fault in this process (Linux arch_prctl(ARCH_SET_CPUID, 0), on CPUs that
 * report "cpuid_fault"; the setting is per thread and inherited by threads started later) and
 * answers each CPUID from a SIGSEGV handler: the real CPUID, run with faulting briefly off, with
 * the feature bits of the wider instruction sets cleared.
 *
 *   avx2:       no AVX-512 of any kind, no AVX-VNNI / AVX-VNNI-INT8 / AVX-IFMA, no AMX, no AVX10:
 *               the int8 instructions of AMD Zen 1-3 and Intel Haswell-Skylake client.
 *   avxvnni:    as avx2, but AVX-VNNI (VEX VPDPBUSD on ymm) kept: Intel Alder Lake to Arrow
 *               Lake client cores without AVX-512 (their AVX-VNNI-INT8 and AVX-IFMA hidden too).
 *   avx512vnni: no AMX, no AVX512-FP16 and no AVX10 (Intel Ice Lake / Cascade Lake, AMD
 *               Zen 4-5: AVX-512 VNNI is their widest int8 instruction).
 *
 * What reads CPUID after the constructor sees the smaller CPU: XNNPACK's and ruy's cpuinfo,
 * ONNX Runtime's MLAS, oneDNN (PyTorch, OpenVINO, TF). What read it before does not: the
 * dynamic loader's own CPU check (glibc's string functions keep their widest versions), which is
 * not what the benchmark compares. XGETBV is not trapped; code that sees no AVX-512 in CPUID
 * does not look at the AVX-512 state bits.
 *
 * tfi_cpuid_mask_state() reports, for the worker's info: 1 active, 0 not asked for, negative
 * the reason it could not start (-1 unknown name, -2 no CPUID faulting here, -3 sigaction
 * failed, -4 another SIGSEGV handler replaced ours). The benchmark refuses to run a limited peer
 * whose worker does not say 1.
 */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#ifndef ARCH_SET_CPUID
#define ARCH_SET_CPUID 0x1012
#endif

/* Bits to clear, by (leaf, subleaf, register). */
typedef struct {
  uint32_t leaf, subleaf;
  uint32_t clear[4]; /* eax, ebx, ecx, edx */
} LeafMask;

#define BIT(n) (1u << (n))

/* Leaf 7 subleaf 0. EBX: AVX512F 16, DQ 17, IFMA 21, PF 26, ER 27, CD 28, BW 30, VL 31.
 * ECX: VBMI 1, VBMI2 6, VNNI 11, BITALG 12, VPOPCNTDQ 14. EDX: 4VNNIW 2, 4FMAPS 3,
 * VP2INTERSECT 8, AMX-BF16 22, AVX512-FP16 23, AMX-TILE 24, AMX-INT8 25. */
static const uint32_t kAvx512Ebx = BIT(16) | BIT(17) | BIT(21) | BIT(26) | BIT(27) | BIT(28) |
                                   BIT(30) | BIT(31);
static const uint32_t kAvx512Ecx = BIT(1) | BIT(6) | BIT(11) | BIT(12) | BIT(14);
static const uint32_t kAvx512Edx = BIT(2) | BIT(3) | BIT(8) | BIT(23);
static const uint32_t kAmxEdx = BIT(22) | BIT(24) | BIT(25);
/* Leaf 7 subleaf 1. EAX: AVX-VNNI 4, AVX512-BF16 5, AMX-FP16 21, AVX-IFMA 23.
 * EDX: AVX-VNNI-INT8 4, AVX-NE-CONVERT 5, AMX-COMPLEX 8, AVX-VNNI-INT16 10, AVX10 19. */
static const uint32_t kAvx2Leaf71Eax = BIT(4) | BIT(5) | BIT(21) | BIT(23);
static const uint32_t kAvx2Leaf71Edx = BIT(4) | BIT(5) | BIT(8) | BIT(10) | BIT(19);
static const uint32_t kAvxVnniLeaf71Eax = BIT(5) | BIT(21) | BIT(23); /* AVX-VNNI kept */
static const uint32_t kNoAmxLeaf71Eax = BIT(21);
static const uint32_t kNoAmxLeaf71Edx = BIT(8) | BIT(19);

static LeafMask g_masks[2]; /* set before the handler is installed */
static int g_state; /* see tfi_cpuid_mask_state */
static volatile long g_emulated;
static struct sigaction g_previous;

static void RealCpuid(uint32_t leaf, uint32_t subleaf, uint32_t out[4]) {
  __asm__ volatile("cpuid"
                   : "=a"(out[0]), "=b"(out[1]), "=c"(out[2]), "=d"(out[3])
                   : "a"(leaf), "c"(subleaf));
}

static void OnSegv(int sig, siginfo_t* info, void* context) {
  ucontext_t* uc = (ucontext_t*)context;
  greg_t* regs = uc->uc_mcontext.gregs;
  /* A faulting CPUID is a general-protection fault: SI_KERNEL, not a page fault, so the
   * instruction bytes at RIP are mapped and can be read. */
  const unsigned char* ip = (const unsigned char*)regs[REG_RIP];
  if (info->si_code == SI_KERNEL && ip[0] == 0x0f && ip[1] == 0xa2) {
    uint32_t leaf = (uint32_t)regs[REG_RAX], subleaf = (uint32_t)regs[REG_RCX];
    uint32_t out[4];
    syscall(SYS_arch_prctl, ARCH_SET_CPUID, 1);
    RealCpuid(leaf, subleaf, out);
    syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0);
    for (int i = 0; i < 2; ++i) {
      if (g_masks[i].leaf == leaf && g_masks[i].subleaf == subleaf) {
        for (int r = 0; r < 4; ++r) out[r] &= ~g_masks[i].clear[r];
      }
    }
    /* CPUID writes the low 32 bits and zeroes the high 32 of each register. */
    regs[REG_RAX] = out[0];
    regs[REG_RBX] = out[1];
    regs[REG_RCX] = out[2];
    regs[REG_RDX] = out[3];
    regs[REG_RIP] += 2;
    __atomic_add_fetch(&g_emulated, 1, __ATOMIC_RELAXED);
    return;
  }
  /* Not ours: put the previous disposition back and return; the fault repeats under it. */
  sigaction(SIGSEGV, &g_previous, NULL);
  (void)sig;
}

__attribute__((constructor)) static void Init(void) {
  const char* name = getenv("TF_FUSED_INT8_CPUID_MASK");
  if (name == NULL || name[0] == '\0') return;
  memset(g_masks, 0, sizeof(g_masks));
  if (strcmp(name, "avx2") == 0) {
    g_masks[0] = (LeafMask){7, 0, {0, kAvx512Ebx, kAvx512Ecx, kAvx512Edx | kAmxEdx}};
    g_masks[1] = (LeafMask){7, 1, {kAvx2Leaf71Eax, 0, 0, kAvx2Leaf71Edx}};
  } else if (strcmp(name, "avxvnni") == 0) {
    g_masks[0] = (LeafMask){7, 0, {0, kAvx512Ebx, kAvx512Ecx, kAvx512Edx | kAmxEdx}};
    g_masks[1] = (LeafMask){7, 1, {kAvxVnniLeaf71Eax, 0, 0, kAvx2Leaf71Edx}};
  } else if (strcmp(name, "avx512vnni") == 0) {
    g_masks[0] = (LeafMask){7, 0, {0, 0, 0, kAmxEdx | BIT(23)}};
    g_masks[1] = (LeafMask){7, 1, {kNoAmxLeaf71Eax, 0, 0, kNoAmxLeaf71Edx}};
  } else {
    g_state = -1;
    return;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = OnSegv;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGSEGV, &sa, &g_previous) != 0) {
    g_state = -3;
    return;
  }
  if (syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0) != 0) {
    sigaction(SIGSEGV, &g_previous, NULL);
    g_state = -2;
    return;
  }
  g_state = 1;
}

/* 1 active, 0 not asked for, < 0 the reason it is not active (the header comment). */
int tfi_cpuid_mask_state(void) {
  if (g_state == 1) {
    struct sigaction now;
    if (sigaction(SIGSEGV, NULL, &now) != 0 || !(now.sa_flags & SA_SIGINFO) ||
        now.sa_sigaction != OnSegv) {
      return -4;
    }
  }
  return g_state;
}

/* How many CPUID instructions were answered here so far. */
long tfi_cpuid_mask_emulated(void) { return __atomic_load_n(&g_emulated, __ATOMIC_RELAXED); }
