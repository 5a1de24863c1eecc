// Copyright tf-fused-int8 authors. Apache 2.0.
//
// The register-only loop bodies of the throughput loops (peak.h), as macros
// of inline assembly shared by the peak_<isa>.cc files: INSN(acc) expands to
// one instruction accumulating into register number acc from the loop's two
// operand registers. Macros only (no code), so nothing of one instruction set
// can end up in another translation unit.
#ifndef TF_FUSED_INT8_CC_CORE_CPU_PEAK_PEAK_ASM_H_
#define TF_FUSED_INT8_CC_CORE_CPU_PEAK_PEAK_ASM_H_

// The end of every ymm loop's block and what the ymm loops clobber (ymm0-11
// and ymm13-15, whichever each uses).
#define TFI_LOOP_END "dec %0\n\t" "jnz 1b\n\t" "vzeroupper\n\t"
#define TFI_YMM_CLOBBERS                                                     \
  "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", \
      "xmm9", "xmm10", "xmm11", "xmm13", "xmm14", "xmm15"

// 12 independent ymm accumulator chains (ymm0-11), operands ymm14 / ymm15
// set to all ones (INIT: the instruction that sets a register to all ones,
// or to zero for float loops).
#define TFI_YMM12_LOOP(INIT, INSN, ITERS)                                 \
  __asm__ volatile(INIT(14) INIT(15) "1:\n\t" INSN(0) INSN(1) INSN(2)     \
                       INSN(3) INSN(4) INSN(5) INSN(6) INSN(7) INSN(8)    \
                           INSN(9) INSN(10) INSN(11) TFI_LOOP_END         \
                   : "+r"(ITERS)                                          \
                   :                                                      \
                   : TFI_YMM_CLOBBERS)

// 6 ymm accumulator chains (ymm0-5) fed by 12 products a block in ymm6-11
// (STEP(t, acc): compute into ymm t, accumulate into ymm acc), operands
// ymm13-15 all ones: the avx2 GEMM's multiply-then-VPADDD steps.
#define TFI_YMM6_CHAIN_LOOP(STEP, ITERS)                                     \
  __asm__ volatile(TFI_YMM_ONES(13) TFI_YMM_ONES(14) TFI_YMM_ONES(15)        \
                   "1:\n\t" STEP(6, 0) STEP(7, 1) STEP(8, 2) STEP(9, 3)       \
                       STEP(10, 4) STEP(11, 5) STEP(6, 0) STEP(7, 1)         \
                           STEP(8, 2) STEP(9, 3) STEP(10, 4) STEP(11, 5)     \
                               TFI_LOOP_END                                  \
                   : "+r"(ITERS)                                             \
                   :                                                         \
                   : TFI_YMM_CLOBBERS)

// 16 independent zmm accumulator chains (zmm0-15), operands zmm30 / zmm31
// all ones.
#define TFI_ZMM16_LOOP(INSN, ITERS)                                         \
  __asm__ volatile(                                                         \
      "vpternlogd $0xff, %%zmm30, %%zmm30, %%zmm30\n\t"                     \
      "vpternlogd $0xff, %%zmm31, %%zmm31, %%zmm31\n\t"                     \
      "1:\n\t" INSN(0) INSN(1) INSN(2) INSN(3) INSN(4) INSN(5) INSN(6)      \
          INSN(7) INSN(8) INSN(9) INSN(10) INSN(11) INSN(12) INSN(13)       \
              INSN(14) INSN(15) "dec %0\n\t"                                \
                                "jnz 1b\n\t"                                \
                                "vzeroupper\n\t"                            \
      : "+r"(ITERS)                                                         \
      :                                                                     \
      : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6",       \
        "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13",         \
        "xmm14", "xmm15", "xmm30", "xmm31")

// The contract epilogue's shared part (the epilogue loops, peak.h) for the
// accumulators in registers 0-3 of kind R ("ymm" or "zmm") into a, b, c, d:
// VCVTDQ2PS, VMULPS by register S (the scale), VADDPS of register B (the
// bias), VCVTPS2DQ each, then the saturating packs (two VPACKSSDW, one
// VPACKSSWB) into a. Each loop adds what its kernels do after the packs.
#define TFI_EPI_CVT(R, src, dst) "vcvtdq2ps %%" R #src ", %%" R #dst "\n\t"
#define TFI_EPI_OP(op, R, k, x) op " %%" R #k ", %%" R #x ", %%" R #x "\n\t"
#define TFI_EPI_RND(R, x) "vcvtps2dq %%" R #x ", %%" R #x "\n\t"
#define TFI_EPI_BODY(R, a, b, c, d, S, B)                                    \
  TFI_EPI_CVT(R, 0, a) TFI_EPI_CVT(R, 1, b) TFI_EPI_CVT(R, 2, c)             \
  TFI_EPI_CVT(R, 3, d) TFI_EPI_OP("vmulps", R, S, a)                         \
  TFI_EPI_OP("vmulps", R, S, b) TFI_EPI_OP("vmulps", R, S, c)                \
  TFI_EPI_OP("vmulps", R, S, d) TFI_EPI_OP("vaddps", R, B, a)                \
  TFI_EPI_OP("vaddps", R, B, b) TFI_EPI_OP("vaddps", R, B, c)                \
  TFI_EPI_OP("vaddps", R, B, d) TFI_EPI_RND(R, a) TFI_EPI_RND(R, b)          \
  TFI_EPI_RND(R, c) TFI_EPI_RND(R, d) TFI_EPI_OP("vpackssdw", R, b, a)       \
  TFI_EPI_OP("vpackssdw", R, d, c)                                           \
  "vpacksswb %%" R #c ", %%" R #a ", %%" R #a "\n\t"

#define TFI_YMM_ONES(r) "vpcmpeqd %%ymm" #r ", %%ymm" #r ", %%ymm" #r "\n\t"
#define TFI_YMM_ZERO(r) "vxorps %%ymm" #r ", %%ymm" #r ", %%ymm" #r "\n\t"

#endif  // TF_FUSED_INT8_CC_CORE_CPU_PEAK_PEAK_ASM_H_
